// Package id makes the ids of managers, workers and tasks.
package id

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// New returns a random 128-bit id as 32 hex digits, for managers and workers.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b[:])
}

// Task returns the id of the seq-th task of manager mid: "<mid>-<seq in
// base 36>". The id carries its manager, so a worker knows where the result
// goes without a lookup; the Lua scripts split it at the first '-'.
func Task(mid string, seq uint64) string {
	return mid + "-" + strconv.FormatUint(seq, 36)
}

// Manager returns the manager id in a task id, or "" if it has none.
func Manager(tid string) string {
	mid, _, ok := strings.Cut(tid, "-")
	if !ok {
		return ""
	}
	return mid
}
