// Command fabraid-plugin-nvmet is fabraid's kernel nvmet target backend
// (the default), a go-plugin plugin started by fabraidd.
package main

import (
	"os"

	"github.com/hashicorp/go-hclog"

	knvmet "github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/plugins/backend"
	"github.com/fabraid/fabraid/plugins/nvmet"
)

func main() {
	log := hclog.New(&hclog.LoggerOptions{Name: "nvmet", Output: os.Stderr, JSONFormat: true})
	backend.Serve(&nvmet.Backend{Root: knvmet.DefaultRoot, SysModule: "/sys/module"}, log)
}
