// Package benchtools puts Debian's fio and mdadm into vmtest guests for the
// in-guest benchmarks (internal/productbench, internal/clusterbench): the
// two binaries, their shared libraries and the loader, fetched once with
// apt-get download into the vmtest cache.
package benchtools
