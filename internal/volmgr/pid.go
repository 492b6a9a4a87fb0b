package volmgr

import "os"

func pid() int { return os.Getpid() }
