package faults

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"strings"
)

// Classic BPF opcodes used by the drop filters (linux/filter.h).
const (
	bpfLdHAbs  = 0x28 // ldh [k]
	bpfLdWAbs  = 0x20 // ld  [k]
	bpfJeqK    = 0x15 // jeq #k, jt, jf
	bpfJgeK    = 0x35 // jge #k, jt, jf
	bpfRetK    = 0x06 // ret #k
	skfAdRand  = 0xfffff000 + 56
	etherTypeO = 12      // EtherType offset; cls_bpf sees the frame from the MAC header
	ipDstO     = 14 + 16 // IPv4 destination offset
)

type bpfInsn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// bpfDropProgram matches IPv4 packets to dst, each with probability p
// (p ≥ 1 matches all of them). A match returns -1, which makes cls_bpf use
// the filter's classid: the blackhole class. Everything else (ARP, other
// destinations) returns 0 and passes.
func bpfDropProgram(dst net.IP, p float64) []bpfInsn {
	ip := binary.BigEndian.Uint32(dst.To4())
	if p >= 1 {
		return []bpfInsn{
			{bpfLdHAbs, 0, 0, etherTypeO},
			{bpfJeqK, 0, 3, 0x0800},
			{bpfLdWAbs, 0, 0, ipDstO},
			{bpfJeqK, 0, 1, ip},
			{bpfRetK, 0, 0, math.MaxUint32},
			{bpfRetK, 0, 0, 0},
		}
	}
	threshold := uint32(p * float64(math.MaxUint32))
	return []bpfInsn{
		{bpfLdHAbs, 0, 0, etherTypeO},
		{bpfJeqK, 0, 5, 0x0800},
		{bpfLdWAbs, 0, 0, ipDstO},
		{bpfJeqK, 0, 3, ip},
		{bpfLdWAbs, 0, 0, skfAdRand}, // a fresh random 32-bit number
		{bpfJgeK, 1, 0, threshold},   // ≥ threshold: keep the packet
		{bpfRetK, 0, 0, math.MaxUint32},
		{bpfRetK, 0, 0, 0},
	}
}

// bpfDropBytecode is bpfDropProgram in tc's "bytecode" syntax.
func bpfDropBytecode(dst net.IP, p float64) string {
	prog := bpfDropProgram(dst, p)
	parts := []string{fmt.Sprint(len(prog))}
	for _, in := range prog {
		parts = append(parts, fmt.Sprintf("%d %d %d %d", in.code, in.jt, in.jf, in.k))
	}
	return strings.Join(parts, ",")
}

// runBPF interprets the subset of classic BPF the drop programs use, so the
// programs are tested without a kernel. rand supplies SKF_AD_RANDOM.
func runBPF(prog []bpfInsn, pkt []byte, rand func() uint32) (uint32, error) {
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.code {
		case bpfLdHAbs:
			if int(in.k)+2 > len(pkt) {
				return 0, nil // the kernel returns 0 on an out-of-bounds load
			}
			a = uint32(binary.BigEndian.Uint16(pkt[in.k:]))
		case bpfLdWAbs:
			if in.k == skfAdRand {
				a = rand()
				continue
			}
			if int(in.k)+4 > len(pkt) {
				return 0, nil
			}
			a = binary.BigEndian.Uint32(pkt[in.k:])
		case bpfJeqK:
			if a == in.k {
				pc += int(in.jt)
			} else {
				pc += int(in.jf)
			}
		case bpfJgeK:
			if a >= in.k {
				pc += int(in.jt)
			} else {
				pc += int(in.jf)
			}
		case bpfRetK:
			return in.k, nil
		default:
			return 0, fmt.Errorf("pc %d: opcode %#x not interpreted", pc, in.code)
		}
	}
	return 0, fmt.Errorf("program fell off its end")
}
