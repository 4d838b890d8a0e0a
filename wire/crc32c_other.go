//go:build !amd64 || purego

package wire

// No folding kernels here.
var crcFoldEnabled, crcFold512 = false, false

func crcFold(reg uint32, p *byte, n int, k *crcFoldK) uint32 {
	panic("wire: no CRC folding kernel on this platform")
}

func crcFoldAVX2(reg uint32, p *byte, n int, k *crcFoldK) uint32 {
	panic("wire: no CRC folding kernel on this platform")
}
