package ublksys

import (
	"testing"
	"unsafe"
)

func TestZeroCopyLayout(t *testing.T) {
	if got := unsafe.Sizeof(ParamsDMA{}); got != ParamsDMASize {
		t.Errorf("sizeof(ParamsDMA) = %d, want %d", got, ParamsDMASize)
	}
	if got := unsafe.Offsetof(ParamsDMA{}.DMA); got != ParamsSize {
		t.Errorf("ParamsDMA.DMA at %d, want %d (after struct ublk_param_zoned)", got, ParamsSize)
	}
	if got := unsafe.Sizeof(RsrcRegister{}); got != RsrcRegisterSize {
		t.Errorf("sizeof(RsrcRegister) = %d, want %d", got, RsrcRegisterSize)
	}
	if got := AutoBufRegAddr(0x1234, UBLK_AUTO_BUF_REG_FALLBACK); got != 0x11234 {
		t.Errorf("AutoBufRegAddr(0x1234, FALLBACK) = %#x, want 0x11234", got)
	}
}
