package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/role"
)

type w struct{}

func (w) Write(context.Context, string, string, any, role.Epoch) error { return nil }

func msg(typ string, body []byte) []byte {
	b := append([]byte(typ), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(8+len(body)))
	return append(b, body...)
}

func main() {
	srv, err := opcua.New(opcua.Config{Host: "127.0.0.1", Port: 48999, AllowAnonymous: true}, opcua.Deps{Logger: zerolog.Nop(), Roles: role.NewBroadcaster(role.State{}), Writer: w{}})
	if err != nil {
		panic(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		panic(err)
	}
	c, err := net.Dial("tcp", "127.0.0.1:48999")
	if err != nil {
		panic(err)
	}
	hello := binary.LittleEndian.AppendUint32(nil, 0)
	for _, v := range []uint32{65536, 65536, 0, 0} {
		hello = binary.LittleEndian.AppendUint32(hello, v)
	}
	url := "opc.tcp://127.0.0.1:48999"
	hello = binary.LittleEndian.AppendUint32(hello, uint32(len(url)))
	hello = append(hello, url...)
	c.Write(msg("HELF", hello))
	buf := make([]byte, 65536)
	n, _ := c.Read(buf)
	fmt.Println("ack", string(buf[:4]), n)
	// OPN None
	req := &ua.OpenSecureChannelRequest{RequestHeader: &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Now(), AdditionalHeader: ua.NewExtensionObject(nil)},
		RequestType: ua.SecurityTokenRequestTypeIssue, SecurityMode: ua.MessageSecurityModeNone, RequestedLifetime: 3600000}
	id, _ := ua.NewFourByteNodeID(0, ua.ServiceTypeID(req)).Encode()
	body, err := ua.Encode(req)
	if err != nil {
		panic(err)
	}
	opn := binary.LittleEndian.AppendUint32(nil, 0)
	opn = binary.LittleEndian.AppendUint32(opn, uint32(len(ua.SecurityPolicyURINone)))
	opn = append(opn, ua.SecurityPolicyURINone...)
	opn = binary.LittleEndian.AppendUint32(opn, 0xFFFFFFFF)
	opn = binary.LittleEndian.AppendUint32(opn, 0xFFFFFFFF)
	opn = binary.LittleEndian.AppendUint32(opn, 1)
	opn = binary.LittleEndian.AppendUint32(opn, 1)
	opn = append(append(opn, id...), body...)
	c.Write(msg("OPNF", opn))
	n, err = c.Read(buf)
	fmt.Println("opn answer", string(buf[:4]), n, err)
	chID := binary.LittleEndian.Uint32(buf[8:])
	// token id: parse response
	off := 12
	for range 3 { // policy, sender certificate, thumbprint
		l := int32(binary.LittleEndian.Uint32(buf[off:]))
		off += 4
		if l > 0 {
			off += int(l)
		}
	}
	off += 8
	_, v, err := ua.DecodeService(buf[off:n])
	if err != nil {
		panic(err)
	}
	tok := v.(*ua.OpenSecureChannelResponse).SecurityToken.TokenID
	wr := &ua.WriteRequest{RequestHeader: &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Now(), AdditionalHeader: ua.NewExtensionObject(nil)},
		NodesToWrite: []*ua.WriteValue{{NodeID: ua.NewNumericNodeID(1, 1), AttributeID: ua.AttributeIDValue,
			Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant([]float64{1})}}}}
	gid, _ := ua.NewFourByteNodeID(0, ua.ServiceTypeID(wr)).Encode()
	gb, err := ua.Encode(wr)
	if err != nil {
		panic(err)
	}
	mode := os.Args[1]
	k := bytes.Index(gb, []byte{0x8B, 1, 0, 0, 0})
	if k < 0 {
		panic("no variant")
	}
	switch mode {
	case "negative":
		binary.LittleEndian.PutUint32(gb[k+1:], 0xFFFFFFFE)
	case "dims":
		gb[k] = 0xCB
		tail := append([]byte{}, gb[k+13:]...)
		gb = append(gb[:k+13], 0xFF, 0xFF, 0xFF, 0x7F)
		gb = append(gb, tail...)
	}
	m := binary.LittleEndian.AppendUint32(nil, chID)
	m = binary.LittleEndian.AppendUint32(m, tok)
	m = binary.LittleEndian.AppendUint32(m, 2)
	m = binary.LittleEndian.AppendUint32(m, 2)
	m = append(append(m, gid...), gb...)
	c.Write(msg("MSGF", m))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err = io.ReadAtLeast(c, buf, 4)
	fmt.Println("answer", string(buf[:max(n, 0)][:min(n, 4)]), n, err)
	fmt.Println("still alive")
	os.Exit(0)
}
