//go:build !amd64 || purego

package sha512x4

const haveAVX2 = false

// blocks4AVX2 is never called where haveAVX2 is false.
func blocks4AVX2(st *lanes, n int) {
	panic("sha512x4: no AVX2 compression on this architecture")
}
