package nvmet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Target reads and converges the nvmet configuration under one configfs
// root. It holds no state besides its configuration: every Apply reads the
// actual state afresh. A Target is safe for concurrent use only in the
// sense that configfs is: run one Apply at a time per root.
type Target struct {
	Root string    // DefaultRoot unless testing path generation
	Own  Ownership // DefaultOwnership() by default
}

// New returns a Target for root with the default ownership.
func New(root string) *Target {
	if root == "" {
		root = DefaultRoot
	}
	return &Target{Root: root, Own: DefaultOwnership()}
}

// Read returns the actual configuration.
func (t *Target) Read() (State, error) { return Read(t.Root) }

// Plan reads the actual state and returns the operations that would
// converge it to desired, without changing anything.
func (t *Target) Plan(desired Spec) (Plan, error) {
	st, err := t.Read()
	if err != nil {
		return nil, err
	}
	return Diff(desired, st, t.Own)
}

// Apply converges configfs to desired and returns the operations it
// carried out (empty when already converged). On error the returned Plan
// holds the operations done so far; calling Apply again finishes the job.
func (t *Target) Apply(desired Spec) (Plan, error) {
	p, err := t.Plan(desired)
	if err != nil {
		return nil, fmt.Errorf("nvmet apply: %w", err)
	}
	done, err := t.Execute(p)
	if err != nil {
		return done, fmt.Errorf("nvmet apply: %w", err)
	}
	return done, nil
}

// Execute carries out p in order, stopping at the first failure. It
// returns the operations done. Operations whose effect is already present
// (mkdir of an existing directory, removal of a missing one) count as done.
func (t *Target) Execute(p Plan) (Plan, error) {
	var done Plan
	for _, o := range p {
		skipped, err := t.exec(o)
		if err != nil {
			return done, err
		}
		if !skipped {
			done = append(done, o)
		}
	}
	return done, nil
}

func (t *Target) exec(o Op) (skipped bool, err error) {
	full := filepath.Join(t.Root, filepath.FromSlash(o.Path))
	switch o.Kind {
	case OpMkdir:
		err = os.Mkdir(full, 0o755)
		if errors.Is(err, fs.ErrExist) {
			return true, nil
		}
	case OpRmdir:
		err = syscall.Rmdir(full)
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
	case OpUnlink:
		err = syscall.Unlink(full)
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
	case OpLink:
		err = os.Symlink(filepath.Join(t.Root, filepath.FromSlash(o.Target)), full)
		if errors.Is(err, fs.ErrExist) {
			return true, nil
		}
	case OpWrite:
		if _, serr := os.Stat(full); errors.Is(serr, fs.ErrNotExist) {
			if o.Optional {
				return true, nil
			}
			if _, perr := os.Stat(filepath.Dir(full)); perr == nil {
				attr := filepath.Base(full)
				if h := missingAttrHint(attr); h != "" {
					return false, newError("write", o.Path, o.redacted(), fmt.Errorf("attribute %s: %w (%s)", attr, ErrNotSupported, h))
				}
				return false, newError("write", o.Path, o.redacted(), fmt.Errorf("attribute %s: %w", attr, ErrNotSupported))
			}
		}
		err = writeAttr(full, o.Value)
		if err != nil {
			return false, newError("write", o.Path, o.redacted(), err)
		}
		return false, nil
	default:
		return false, fmt.Errorf("unknown operation %v", o.Kind)
	}
	return false, newError(o.Kind.String(), o.Path, "", err)
}

func (o Op) redacted() string {
	if o.Secret && o.Value != "" {
		return "<secret>"
	}
	return o.Value
}

// writeAttr writes v to a configfs attribute in one write(2), as configfs
// requires (each write is one store call).
func writeAttr(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(v))
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}
