package redmap

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// NewID returns a random 128-bit id as 32 hex digits, for managers and workers.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b[:])
}

// TaskID returns the id of the seq-th task of manager mid: "<mid>-<seq in
// base 36>". The id carries its manager, so a worker knows where the result
// goes without a lookup; the Lua scripts split it at the first '-'.
func TaskID(mid string, seq uint64) string {
	return mid + "-" + strconv.FormatUint(seq, 36)
}

// TaskManager returns the manager id in a task id, or "" if it has none.
func TaskManager(tid string) string {
	mid, _, ok := strings.Cut(tid, "-")
	if !ok {
		return ""
	}
	return mid
}
