// Command gowriter writes the arrays the TypeScript client's test reads
// back: the Go client, through a real zarrgate server, writes each array's
// values as a known function of the element's flat C-order index (the
// test computes the same function), and prints a JSON manifest of what it
// wrote. With -certs DIR it also writes a CA, a server certificate for
// 127.0.0.1 and a client certificate, for the test's TLS server.
//
//	gowriter -addr 127.0.0.1:PORT [-certs DIR] > manifest.json
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// entry is one array of the manifest.
type entry struct {
	Path       string  `json:"path"`
	DataType   string  `json:"dtype"`
	Shape      []int64 `json:"shape"`
	ChunkShape []int64 `json:"chunks"`
	ShardShape []int64 `json:"shards,omitempty"`
	Codecs     string  `json:"codecs,omitempty"`
	FillValue  string  `json:"fill,omitempty"`
	Format     string  `json:"format,omitempty"`
	Attributes string  `json:"attributes,omitempty"`
	// Written: the values are the data type's pattern (test/patterns.ts);
	// otherwise every element is the fill value.
	Written bool `json:"written"`
}

const bigEndian = `[{"name": "bytes", "configuration": {"endian": "big"}}]`

var arrays = []entry{
	{Path: "f32", DataType: "float32", Shape: []int64{37, 53}, ChunkShape: []int64{8, 10}, Attributes: `{"units": "K", "n": [1, 2]}`},
	{Path: "f64_sharded", DataType: "float64", Shape: []int64{64, 48}, ChunkShape: []int64{8, 8}, ShardShape: []int64{32, 24}},
	{Path: "i16", DataType: "int16", Shape: []int64{5, 6, 7}, ChunkShape: []int64{2, 3, 4}},
	{Path: "u8", DataType: "uint8", Shape: []int64{1000}, ChunkShape: []int64{64}},
	{Path: "i32_be", DataType: "int32", Shape: []int64{40, 40}, ChunkShape: []int64{16, 16}, Codecs: bigEndian},
	{Path: "f64_be_v2", DataType: "float64", Shape: []int64{9, 11}, ChunkShape: []int64{4, 4}, Codecs: bigEndian, Format: "v2"},
	{Path: "i64_sharded", DataType: "int64", Shape: []int64{20, 30}, ChunkShape: []int64{7, 7}, ShardShape: []int64{14, 14}},
	{Path: "u64", DataType: "uint64", Shape: []int64{100}, ChunkShape: []int64{16}},
	{Path: "bool", DataType: "bool", Shape: []int64{3, 5}, ChunkShape: []int64{2, 2}},
	// One 2.4 MiB chunk: its block is split into several messages on the wire.
	{Path: "big", DataType: "float32", Shape: []int64{1024, 600}, ChunkShape: []int64{1024, 600}},
	{Path: "f16", DataType: "float16", Shape: []int64{10}, ChunkShape: []int64{4}, FillValue: "1.5"},
	{Path: "str", DataType: "string", Shape: []int64{4}, ChunkShape: []int64{2}},
	{Path: "grp/a", DataType: "uint8", Shape: []int64{2}, ChunkShape: []int64{2}},
	{Path: "grp/sub/b", DataType: "uint8", Shape: []int64{2}, ChunkShape: []int64{2}},
}

// The patterns: value of the element at flat index i (test/patterns.ts).
// Conversions wrap as two's complement, as the test's do.
func pattern(dtype string, n int64) any {
	switch dtype {
	case "float32":
		return fill(n, func(i int64) float32 { return float32(i)*0.5 - 100 })
	case "float64":
		return fill(n, func(i int64) float64 { return float64(i)/3 - 1e6 })
	case "int16":
		return fill(n, func(i int64) int16 { return int16(i*7 - 30000) })
	case "uint8":
		return fill(n, func(i int64) uint8 { return uint8(i * 13) })
	case "int32":
		return fill(n, func(i int64) int32 { return int32(i*100003 - 1<<30) })
	case "int64":
		return fill(n, func(i int64) int64 { return i<<33 + i - 1<<62 })
	case "uint64":
		return fill(n, func(i int64) uint64 { return 1<<63 + uint64(i)*3 })
	case "bool":
		return fill(n, func(i int64) bool { return i%3 == 0 })
	}
	return nil
}

func fill[T any](n int64, f func(int64) T) []T {
	v := make([]T, n)
	for i := range v {
		v[i] = f(int64(i))
	}
	return v
}

func main() {
	addr := flag.String("addr", "", "server address")
	certs := flag.String("certs", "", "also write test certificates into this directory")
	flag.Parse()
	if err := run(*addr, *certs); err != nil {
		fmt.Fprintln(os.Stderr, "gowriter:", err)
		os.Exit(1)
	}
}

func run(addr, certs string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if certs != "" {
		if err := writeCerts(certs); err != nil {
			return err
		}
	}
	c, err := client.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for i, e := range arrays {
		format := client.Format(0)
		if e.Format == "v2" {
			format = client.FormatV2
		}
		a, err := c.CreateArray(ctx, e.Path, client.ArraySpec{
			Format: format, Shape: e.Shape, DataType: e.DataType, ChunkShape: e.ChunkShape, ShardShape: e.ShardShape,
			Codecs: e.Codecs, FillValue: e.FillValue, Attributes: e.Attributes,
		})
		if err != nil {
			return fmt.Errorf("create %s: %w", e.Path, err)
		}
		n := int64(1)
		for _, s := range e.Shape {
			n *= s
		}
		switch v := pattern(e.DataType, n).(type) {
		case nil:
			continue
		case []float32:
			_, err = client.Write(ctx, a, nil, v)
		case []float64:
			_, err = client.Write(ctx, a, nil, v)
		case []int16:
			_, err = client.Write(ctx, a, nil, v)
		case []uint8:
			_, err = client.Write(ctx, a, nil, v)
		case []int32:
			_, err = client.Write(ctx, a, nil, v)
		case []int64:
			_, err = client.Write(ctx, a, nil, v)
		case []uint64:
			_, err = client.Write(ctx, a, nil, v)
		case []bool:
			_, err = client.Write(ctx, a, nil, v)
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", e.Path, err)
		}
		arrays[i].Written = true
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(arrays)
}

// writeCerts writes ca.pem, server.pem + server.key (for 127.0.0.1) and
// client.pem + client.key, all signed by the CA, valid for a day.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "zarrgate ts test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	for i, name := range []string{"server", "client"} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "zarrgate ts test " + name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if name == "server" {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".key"), "PRIVATE KEY", keyDER); err != nil {
			return err
		}
	}
	return nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
