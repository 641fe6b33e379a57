package opcua

import (
	"context"
	"crypto/rsa"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uapolicy"
)

// tokenTap sits between a client and the server, passes every byte on
// unchanged, and records the TokenId of each OpenSecureChannel answer the
// server sends, which it decrypts with the client's key.
type tokenTap struct {
	ln        net.Listener
	target    string
	clientKey *rsa.PrivateKey

	mu     sync.Mutex
	tokens []uint32
	errs   []error
}

func startTokenTap(t *testing.T, target string, clientKey *rsa.PrivateKey) *tokenTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap := &tokenTap{ln: ln, target: target, clientKey: clientKey}
	t.Cleanup(func() { ln.Close() })
	go tap.run()
	return tap
}

func (p *tokenTap) endpoint() string { return "opc.tcp://" + p.ln.Addr().String() }

func (p *tokenTap) run() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		go func() {
			_, _ = io.Copy(s, c)
			s.Close()
		}()
		go func() {
			defer c.Close()
			p.watch(c, s)
		}()
	}
}

// watch copies the server's messages to the client, one by one.
func (p *tokenTap) watch(client, server net.Conn) {
	hdr := make([]byte, 8)
	for {
		if _, err := io.ReadFull(server, hdr); err != nil {
			return
		}
		msg := make([]byte, binary.LittleEndian.Uint32(hdr[4:]))
		copy(msg, hdr)
		if _, err := io.ReadFull(server, msg[8:]); err != nil {
			return
		}
		if string(msg[:3]) == "OPN" {
			p.record(msg)
		}
		if _, err := client.Write(msg); err != nil {
			return
		}
	}
}

func (p *tokenTap) record(msg []byte) {
	id, err := p.tokenID(msg)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.errs = append(p.errs, err)
		return
	}
	p.tokens = append(p.tokens, id)
}

// tokenID reads an OpenSecureChannel answer: the asymmetric security
// header (policy, sender certificate, receiver thumbprint), then, for a
// secure policy, the rest encrypted with the client's public key; the
// sequence header and the response follow (padding and signature after
// it do not matter to the decoder).
func (p *tokenTap) tokenID(msg []byte) (uint32, error) {
	at := 12
	fields := make([][]byte, 3)
	for i := range fields {
		n := int(int32(binary.LittleEndian.Uint32(msg[at:])))
		at += 4
		if n > 0 {
			fields[i] = msg[at : at+n]
			at += n
		}
	}
	plain := msg[at:]
	if policy := string(fields[0]); policy != ua.SecurityPolicyURINone {
		pub, err := uapolicy.PublicKey(fields[1])
		if err != nil {
			return 0, err
		}
		algo, err := uapolicy.Asymmetric(policy, p.clientKey, pub)
		if err != nil {
			return 0, err
		}
		if plain, err = algo.Decrypt(plain); err != nil {
			return 0, err
		}
	}
	_, v, err := ua.DecodeService(plain[8:])
	if err != nil {
		return 0, err
	}
	return v.(*ua.OpenSecureChannelResponse).SecurityToken.TokenID, nil
}

func (p *tokenTap) seen() ([]uint32, []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint32(nil), p.tokens...), append([]error(nil), p.errs...)
}

// A client renews its SecurityToken at 75 % of the token's lifetime. Each
// renewal must bring a new TokenId (Part 4, 5.5.2; Part 6, 6.7.4): strict
// clients (node-opcua, the OPC Foundation stack) take an answer with the
// old id for a stale one, keep the old keys and fail every request after
// it. Reads must go on across the renewals, on SignAndEncrypt and on None.
func TestTokenRenewalGivesNewTokenIDs(t *testing.T) {
	clientCert, trusted := trustedClient(t)
	for _, tc := range []struct {
		name   string
		policy string
		mode   ua.MessageSecurityMode
	}{
		{"SignAndEncrypt", ua.SecurityPolicyURIBasic256Sha256, ua.MessageSecurityModeSignAndEncrypt},
		{"Sign", ua.SecurityPolicyURIBasic256Sha256, ua.MessageSecurityModeSign},
		{"None", ua.SecurityPolicyURINone, ua.MessageSecurityModeNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, activeState(), func(c *Config) {
				c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}, {Policy: "Basic256Sha256", Mode: "Sign"}, {Policy: "None", Mode: "None"}}
				c.TrustedClientsDir = trusted
			})
			tap := startTokenTap(t, ts.Endpoint()[len("opc.tcp://"):], testKey())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			eps, err := gopcua.GetEndpoints(ctx, ts.Endpoint())
			if err != nil || len(eps) == 0 {
				t.Fatal(eps, err)
			}
			opts := []gopcua.Option{
				gopcua.SecurityPolicy(tc.policy), gopcua.SecurityMode(tc.mode), gopcua.AuthAnonymous(),
				gopcua.Lifetime(2 * time.Second),
				gopcua.AutoReconnect(false), gopcua.DialTimeout(3 * time.Second), gopcua.RequestTimeout(3 * time.Second),
			}
			if tc.policy != ua.SecurityPolicyURINone {
				opts = append(opts, gopcua.Certificate(clientCert), gopcua.PrivateKey(testKey()), gopcua.RemoteCertificate(eps[0].ServerCertificate))
			}
			c, err := gopcua.NewClient(tap.endpoint(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Connect(ctx); err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer c.Close(context.Background())
			// Three renewals at least (one each 1.5 s), a read every 200 ms.
			deadline := time.Now().Add(6 * time.Second)
			reads := 0
			for time.Now().Before(deadline) {
				rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
				resp, err := c.Read(rctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: ua.NewNumericNodeID(0, id.Server_ServerStatus_CurrentTime), AttributeID: ua.AttributeIDValue}}})
				rcancel()
				if err != nil || resp.Results[0].Status != ua.StatusOK {
					t.Fatalf("read %d after %d good ones failed: %v", reads+1, reads, err)
				}
				reads++
				time.Sleep(200 * time.Millisecond)
			}
			tokens, errs := tap.seen()
			if len(errs) > 0 {
				t.Fatalf("OpenSecureChannel answers the tap could not read: %v", errs)
			}
			if len(tokens) < 4 {
				t.Fatalf("%d tokens issued in 6 s with a 2 s lifetime, want 4 or more: %v", len(tokens), tokens)
			}
			seen := map[uint32]bool{}
			for _, id := range tokens {
				if seen[id] {
					t.Fatalf("TokenId %d issued twice (tokens in order: %v)", id, tokens)
				}
				seen[id] = true
			}
		})
	}
}
