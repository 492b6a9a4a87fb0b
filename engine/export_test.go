package engine

// setFaults re-introduces the bugs named in f (see faults.go); call it
// before the volume serves requests.
func (v *Volume) setFaults(f faults) {
	v.faults = f
	if v.bm != nil {
		v.bm.endForgets = f.endForgets
	}
}
