// Command fabraid-plugin-spdk is fabraid's SPDK nvmf_tgt target backend,
// a go-plugin plugin started by fabraidd (it refuses to run otherwise).
// Flag -socket names nvmf_tgt's JSON-RPC socket (spdk_rpc_socket).
package main

import (
	"flag"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/fabraid/fabraid/plugins/backend"
	"github.com/fabraid/fabraid/plugins/spdk"
)

func main() {
	socket := flag.String("socket", spdk.DefaultSocket, "nvmf_tgt JSON-RPC unix socket")
	flag.Parse()
	log := hclog.New(&hclog.LoggerOptions{Name: "spdk", Output: os.Stderr, JSONFormat: true})
	backend.Serve(spdk.New(*socket), log)
}
