// Command pyindex counts the identifiers of every .py file under a tree, and
// builds their inverted index (identifier → the files it is in), three
// ways, so that they can be compared: a map/reduce by key
// (manager.ReduceByKeySeq: the shuffle on the workers), a fold of maps
// (manager.MapReduce with a map-valued reducer: every partial travels to
// the manager, which holds the whole result), and a plain loop in one
// goroutine.
//
//	go run ./examples/pyindex worker                        # a worker process (REDIS_URL)
//	go run ./examples/pyindex run -job counts -how shuffle  # one run (REDIS_URL for shuffle and fold)
//	go run ./examples/pyindex measure -dir D -runs 3        # all of it, measured
//
// run prints one line, "result job=… how=… keys=… digest=… wall=… rss=…":
// the number of identifiers, a digest of the result that does not depend on
// its order (equal digests, equal results), the wall time and the process's
// peak resident memory. measure starts its own redis-server on a free port
// and two worker processes, runs each job each way as a process of its own,
// -runs times, and prints the medians with Redis's peak memory.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/zeebo/blake3"

	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/examples/pyindex/idents"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

const usage = "usage: pyindex worker [worker flags] | pyindex run -job counts|index -how shuffle|fold|sequential [-dir D] [-partitions P] | pyindex measure [-dir D] [-runs N]"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "worker":
		if os.Getenv("REDMAP_QUEUE") == "" {
			os.Setenv("REDMAP_QUEUE", "pyindex")
		}
		err = worker.Main(os.Args[2:], idents.Counts, idents.Index, idents.SumCounts, idents.UnionFiles,
			idents.FoldCounts, idents.FoldIndex, idents.MergeCountMaps, idents.MergeIndexMaps)
	case "run":
		err = run(os.Args[2:])
	case "measure":
		err = measure(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pyindex:", err)
		os.Exit(1)
	}
}

// defaultDir is the tree the issue measured on: about 1.9 GB, 18,000 .py
// files.
const defaultDir = "/usr/lib/google-cloud-sdk"

func run(args []string) error {
	flags := flag.NewFlagSet("run", flag.ContinueOnError)
	dir := flags.String("dir", defaultDir, "tree whose .py files to read")
	job := flags.String("job", "counts", "counts or index")
	how := flags.String("how", "shuffle", "shuffle, fold or sequential")
	parts := flags.Int("partitions", 32, "partitions of the shuffle")
	queue := flags.String("queue", "pyindex", "queue to submit to")
	if err := flags.Parse(args); err != nil {
		return err
	}
	files, err := pyFiles(*dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var d digest
	var st manager.Stats
	switch *how {
	case "sequential":
		err = sequential(*job, files, &d)
	case "shuffle", "fold":
		st, err = distributed(ctx, *queue, *job, *how, *parts, files, &d)
	default:
		err = fmt.Errorf("unknown -how %q", *how)
	}
	if err != nil {
		return err
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("result job=%s how=%s files=%d keys=%d digest=%016x wall=%.3f rss=%d partials=%d outputs=%d\n",
		*job, *how, len(files), d.keys, d.sum, time.Since(start).Seconds(), ru.Maxrss*1024, st.PartialBytes, st.OutputBytes)
	return nil
}

// digest sums a hash of each key/value pair: the same for the same pairs
// in any order, so a result can be checked as it streams by.
type digest struct {
	keys int
	sum  uint64
}

func (d *digest) add(k string, v []byte) {
	h := blake3.New()
	h.Write([]byte(k))
	h.Write([]byte{0})
	h.Write(v)
	var b [8]byte
	h.Digest().Read(b[:])
	d.sum += binary.LittleEndian.Uint64(b[:])
	d.keys++
}

func (d *digest) count(k string, n int64) { d.add(k, binary.LittleEndian.AppendUint64(nil, uint64(n))) }

func (d *digest) files(k string, ids []int32) {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range idents.Sorted(ids) {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	d.add(k, b)
}

// sequential is the plain program: every file read and scanned in turn.
func sequential(job string, files []idents.File, d *digest) error {
	ctx := context.Background()
	switch job {
	case "counts":
		counts := make(map[string]int64)
		for _, f := range files {
			if err := idents.CountFile(ctx, f, func(k string, n int64) { counts[k] += n }); err != nil {
				return err
			}
		}
		for k, n := range counts {
			d.count(k, n)
		}
	case "index":
		index := make(map[string][]int32)
		for _, f := range files {
			if err := idents.IndexFile(ctx, f, func(k string, ids []int32) { index[k] = append(index[k], ids...) }); err != nil {
				return err
			}
		}
		for k, ids := range index {
			d.files(k, ids)
		}
	default:
		return fmt.Errorf("unknown -job %q", job)
	}
	return nil
}

// distributed runs the job on the queue's workers (REDIS_URL), by key or
// as a fold, and returns the manager's counters.
func distributed(ctx context.Context, queue, job, how string, parts int, files []idents.File, d *digest) (manager.Stats, error) {
	rdb, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		return manager.Stats{}, fmt.Errorf("REDIS_URL: %w", err)
	}
	defer rdb.Close()
	m, err := manager.New(rdb, manager.Options{Queue: queue})
	if err != nil {
		return manager.Stats{}, err
	}
	defer m.Close()
	err = job1(ctx, m, job, how, parts, files, d)
	return m.Stats(), err
}

// job1 runs one job one way on m.
func job1(ctx context.Context, m *manager.Manager, job, how string, parts int, files []idents.File, d *digest) error {
	switch job + " " + how {
	case "counts shuffle":
		seq, errOf := manager.ReduceByKeySeq(ctx, m, idents.Counts, idents.SumCounts, files, manager.Partitions(parts))
		for k, n := range seq {
			d.count(k, n)
		}
		return errOf()
	case "index shuffle":
		seq, errOf := manager.ReduceByKeySeq(ctx, m, idents.Index, idents.UnionFiles, files, manager.Partitions(parts))
		for k, ids := range seq {
			d.files(k, ids)
		}
		return errOf()
	case "counts fold":
		counts, err := manager.MapReduce(ctx, m, idents.FoldCounts, idents.MergeCountMaps, files)
		for k, n := range counts {
			d.count(k, n)
		}
		return err
	case "index fold":
		index, err := manager.MapReduce(ctx, m, idents.FoldIndex, idents.MergeIndexMaps, files)
		for k, ids := range index {
			d.files(k, ids)
		}
		return err
	}
	return fmt.Errorf("unknown -job %q or -how %q", job, how)
}

// pyFiles returns the .py files under dir, numbered in walk order.
func pyFiles(dir string) ([]idents.File, error) {
	var files []idents.File
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() && strings.HasSuffix(p, ".py") {
			files = append(files, idents.File{ID: int32(len(files)), Path: p})
		}
		return nil
	})
	return files, err
}
