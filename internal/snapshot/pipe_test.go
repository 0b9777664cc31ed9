package snapshot

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// TestChunkPipeCarriesEveryByteInOrder: rows of every size, some larger
// than a chunk, arrive intact and in order, in reads of at most the
// reader's buffer, then the writer's end (EOF or its error).
func TestChunkPipeCarriesEveryByteInOrder(t *testing.T) {
	for _, end := range []error{nil, errors.New("source failed")} {
		p := newChunkPipe()
		var sent bytes.Buffer
		rng := rand.New(rand.NewPCG(1, 2))
		go func() {
			for i := range 5000 {
				n := rng.IntN(200)
				if i%500 == 0 {
					n = 3*chunkSize + 17
				}
				row := bytes.Repeat([]byte{byte('a' + i%26)}, n)
				row = append(row, '\n')
				sent.Write(row)
				if _, err := p.Write(row); err != nil {
					t.Errorf("write: %v", err)
				}
			}
			p.CloseWithError(end)
		}()
		var got bytes.Buffer
		buf := make([]byte, 65531)
		var err error
		for {
			var n int
			n, err = p.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		want := io.EOF
		if end != nil {
			want = end
		}
		if err != want {
			t.Errorf("the reader ended with %v, want %v", err, want)
		}
		if !bytes.Equal(got.Bytes(), sent.Bytes()) {
			t.Errorf("read %d bytes, not the %d written", got.Len(), sent.Len())
		}
	}
}

// TestChunkPipeReaderGone: a writer whose reader stopped gets an error
// instead of blocking forever.
func TestChunkPipeReaderGone(t *testing.T) {
	p := newChunkPipe()
	p.closeRead()
	row := bytes.Repeat([]byte{'x'}, 1000)
	for range 10 * chunkSize / len(row) {
		if _, err := p.Write(row); err != nil {
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("write: %v, want io.ErrClosedPipe", err)
			}
			return
		}
	}
	t.Fatal("the writer never noticed the reader was gone")
}

// BenchmarkChunkPipe: 100-byte rows, one Write each (as pgx's CopyTo
// writes), read in CopyFrom's 64 KiB reads.
func BenchmarkChunkPipe(b *testing.B) {
	row := append(bytes.Repeat([]byte{'r'}, 99), '\n')
	b.SetBytes(int64(len(row)))
	p := newChunkPipe()
	go func() {
		for range b.N {
			_, _ = p.Write(row)
		}
		p.CloseWithError(nil)
	}()
	buf := make([]byte, 65531)
	for {
		if _, err := p.Read(buf); err != nil {
			break
		}
	}
}

// BenchmarkIOPipe is the same through io.Pipe (the copy before chunkPipe).
func BenchmarkIOPipe(b *testing.B) {
	row := append(bytes.Repeat([]byte{'r'}, 99), '\n')
	b.SetBytes(int64(len(row)))
	pr, pw := io.Pipe()
	go func() {
		for range b.N {
			_, _ = pw.Write(row)
		}
		pw.Close()
	}()
	buf := make([]byte, 65531)
	for {
		if _, err := pr.Read(buf); err != nil {
			break
		}
	}
}
