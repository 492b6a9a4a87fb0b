package rpmbuild

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Version is a build's version in its two spellings.
type Version struct {
	Describe string // git describe --tags --always --dirty: stamped into the binaries
	RPM      string // the RPM Version tag derived from it
}

var describeRE = regexp.MustCompile(`^v?(\d+(?:\.\d+)*)(?:-(\d+)-g([0-9a-f]+))?(-dirty)?$`)

// RPMVersion maps git describe output to an RPM version that sorts the
// way the commits do (rpm >= 4.15 for '^', el9 has 4.16):
//
//	v1.2.0              -> 1.2.0
//	v1.2.0-5-gabc1234   -> 1.2.0^5.gabc1234   (5 commits after v1.2.0)
//	abc1234 (no tag)    -> 0^N.gabc1234        (N = commits in history)
//
// and appends ".dirty" for a modified tree.
func RPMVersion(describe string, commits int) (string, error) {
	if m := describeRE.FindStringSubmatch(describe); m != nil {
		v := m[1]
		if m[2] != "" {
			v += "^" + m[2] + ".g" + m[3]
		}
		if m[4] != "" {
			v += ".dirty"
		}
		return v, nil
	}
	sha, dirty := strings.CutSuffix(describe, "-dirty")
	if !regexp.MustCompile(`^[0-9a-f]{4,40}$`).MatchString(sha) {
		return "", fmt.Errorf("version: cannot make an RPM version of %q", describe)
	}
	v := fmt.Sprintf("0^%d.g%s", commits, sha)
	if dirty {
		v += ".dirty"
	}
	return v, nil
}

func git(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Describe returns the version of the checkout at root.
func Describe(ctx context.Context, root string) (Version, error) {
	d, err := git(ctx, root, "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return Version{}, err
	}
	n, err := git(ctx, root, "rev-list", "--count", "HEAD")
	if err != nil {
		return Version{}, err
	}
	count, err := strconv.Atoi(n)
	if err != nil {
		return Version{}, fmt.Errorf("git rev-list --count: %q", n)
	}
	v, err := RPMVersion(d, count)
	return Version{Describe: d, RPM: v}, err
}

// SourceDateEpoch returns SOURCE_DATE_EPOCH when env gives one, else the
// time of the checkout's last commit.
func SourceDateEpoch(ctx context.Context, root, env string) (time.Time, error) {
	if env == "" {
		var err error
		if env, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	s, err := strconv.ParseInt(env, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", env)
	}
	return time.Unix(s, 0).UTC(), nil
}
