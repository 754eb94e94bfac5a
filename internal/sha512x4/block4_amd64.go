//go:build amd64 && !purego

package sha512x4

import "golang.org/x/sys/cpu"

var haveAVX2 = cpu.X86.HasAVX2

// blocks4AVX2 compresses n blocks of each of the four lanes, lane l's blocks
// read from st.p[l] on, with AVX2: it is blocks4Go, one lane per 64-bit
// element of the vector registers.
//
//go:noescape
func blocks4AVX2(st *lanes, n int)
