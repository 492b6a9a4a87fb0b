module github.com/fabraid/fabraid

go 1.26.0

require (
	github.com/klauspost/reedsolomon v1.14.2
	github.com/spf13/cobra v1.10.2
	github.com/ulikunitz/xz v0.5.17
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/cpuid/v2 v2.3.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)
