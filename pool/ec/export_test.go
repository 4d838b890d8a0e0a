package ec

// MarkUnsure records the bytes [off, off+n) of the volume as written by
// a chain cut short, for the tests of the repair.
func (v *Volume) MarkUnsure(off int64, n int) {
	ps, err := v.pieces(off, n)
	if err != nil {
		panic(err)
	}
	for _, pc := range ps {
		v.markUnsure(pc)
	}
}
