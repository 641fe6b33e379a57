package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sync"
)

// maxSyncBatch bounds how many record lines share one fsync, so one sync
// never waits on an unbounded backlog.
const maxSyncBatch = 1024

type appendReq struct {
	line []byte
	done chan error
}

// recorder appends lines to the record file from one goroutine and fsyncs
// once per batch of concurrently submitted lines (group commit): a request
// handler waits only for the sync that covers its own line.
type recorder struct {
	file *os.File
	// fsync is false for throughput runs: lines are written but not
	// synced, the way a receiver that acknowledges from memory behaves.
	fsync bool
	reqs  chan appendReq
	quit  chan struct{}
	ended chan struct{}

	closeOnce sync.Once
	closeErr  error
}

func newRecorder(file *os.File, fsync bool) *recorder {
	r := &recorder{file: file, fsync: fsync, reqs: make(chan appendReq), quit: make(chan struct{}), ended: make(chan struct{})}
	go r.loop()
	return r
}

var errRecorderClosed = errors.New("recorder closed")

// append writes line (which must end in '\n') and returns once it is synced.
func (r *recorder) append(line []byte) error {
	if r.file == nil {
		return nil
	}
	req := appendReq{line: line, done: make(chan error, 1)}
	select {
	case r.reqs <- req:
	case <-r.ended:
		return errRecorderClosed
	}
	return <-req.done
}

func (r *recorder) loop() {
	defer close(r.ended)
	if r.file == nil {
		<-r.quit
		return
	}
	w := bufio.NewWriterSize(r.file, 256<<10)
	batch := make([]appendReq, 0, maxSyncBatch)
	for {
		select {
		case req := <-r.reqs:
			batch = append(batch[:0], req)
		case <-r.quit:
			return
		}
	collect:
		for len(batch) < maxSyncBatch {
			select {
			case req := <-r.reqs:
				batch = append(batch, req)
			default:
				break collect
			}
		}
		var err error
		for _, req := range batch {
			if _, werr := w.Write(req.line); werr != nil && err == nil {
				err = werr
			}
		}
		if ferr := w.Flush(); ferr != nil && err == nil {
			err = ferr
		}
		if r.fsync {
			if serr := r.file.Sync(); serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			err = fmt.Errorf("write record: %w", err)
		}
		for _, req := range batch {
			req.done <- err
		}
	}
}

// close stops the writer after the lines already handed over and closes
// the file. Safe to call more than once.
func (r *recorder) close() error {
	r.closeOnce.Do(func() {
		close(r.quit)
		<-r.ended
		if r.file != nil {
			if err := r.file.Close(); err != nil {
				r.closeErr = fmt.Errorf("close record file: %w", err)
			}
		}
	})
	return r.closeErr
}
