package rdb

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
)

var (
	scriptLine = regexp.MustCompile(`@user_script:(\d+)`)
	callOnLine = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)
	quotedCmd  = regexp.MustCompile(`'([a-zA-Z|]+)' command`)
)

// command returns the Redis command on the line of s that reply names
// ("... @user_script:9."), or "".
func (s *script) command(reply string) string {
	m := scriptLine.FindStringSubmatch(reply)
	if m == nil {
		return ""
	}
	n, _ := strconv.Atoi(m[1])
	for i := n - 1; i >= 0 && i < len(s.lines); i-- {
		if c := callOnLine.FindStringSubmatch(s.lines[i]); c != nil {
			return strings.ToUpper(c[1])
		}
		if i < n-3 { // a call spans a few lines at most
			break
		}
	}
	return ""
}

// Unreachable reports whether err means Redis could not be reached (a
// refused, dropped or timed-out connection), as opposed to an error reply
// from a server that is there (out of memory, a script error) or the
// caller's own context ending. A refusal (a *redmap.CommandError, which
// keeps the reply as text, not as a redis.Error) is a reply too: were it
// taken for an outage, a refused call would be retried for as long as an
// outage is (a batch's history record waited out its 2 s budget on a
// revoked TIME before Wait returned).
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || Refused(err) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// transientReplies are error replies of a server that is there but cannot
// serve for now: loading a dataset, a replica or a primary in a failover, a
// cluster resharding, a long script running, a blocked read ended because
// its node changed role (UNBLOCKED).
var transientReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "MOVED", "ASK", "NOREPLICAS", "NOTBUSY", "UNBLOCKED"}

// Transient reports whether err may heal by itself: Redis unreachable, or
// busy with a restart or failover. Callers retry those for a bounded time.
func Transient(err error) bool {
	if Unreachable(err) {
		return true
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	if replyIn(err, transientReplies) {
		return true
	}
	msg := reply.Error()
	return strings.HasPrefix(msg, "ERR max number of clients") ||
		// A script's key moved to another node of a Cluster (its slot
		// migrating): the script's guard key keeps redmap's scripts from
		// it, this covers any other.
		strings.Contains(msg, "Script attempted to access a non local key") ||
		strings.Contains(msg, "Script attempted to execute a command while the cluster is down")
}

// replyIn reports whether err is an error reply whose first word is one of
// kinds.
func replyIn(err error, kinds []string) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	first, _, _ := strings.Cut(reply.Error(), " ")
	for _, k := range kinds {
		if first == k {
			return true
		}
	}
	return false
}

// OutOfMemory reports whether err is Redis refusing a write at maxmemory.
func OutOfMemory(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "OOM ")
}

// refused returns err as a *redmap.CommandError if it is an error reply that
// retrying does not heal: neither transient nor out of memory. op says what
// redmap was doing; s is the script that ran (nil for a plain command) and
// cmd the command sent, used when the reply does not name one.
func refused(op string, s *script, cmd string, err error) *redmap.CommandError {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) || Transient(err) || OutOfMemory(err) {
		return nil
	}
	msg := reply.Error()
	ce := &redmap.CommandError{Op: op, Reply: msg, Kind: redmap.ErrRefused}
	switch first, _, _ := strings.Cut(msg, " "); {
	case first == "NOPERM" || first == "NOAUTH" || first == "WRONGPASS",
		strings.Contains(msg, "can't run this command"), strings.Contains(msg, "can't access at least one of the keys"):
		ce.Kind = redmap.ErrPermission
	}
	if m := quotedCmd.FindStringSubmatch(msg); m != nil {
		ce.Command = strings.ToUpper(m[1])
	} else if s != nil {
		ce.Command = s.command(msg)
		if ce.Command == "" {
			ce.Command = "EVALSHA " + s.name
		} else {
			ce.Command += " (in " + s.name + ")"
		}
	} else {
		ce.Command = cmd
	}
	return ce
}

// wrap says what failed: a *redmap.CommandError for a refusal, else err
// prefixed with op.
func wrap(op string, s *script, cmd string, err error) error {
	if err == nil {
		return nil
	}
	if ce := refused(op, s, cmd, err); ce != nil {
		return ce
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Refused reports whether err is a refusal (a *redmap.CommandError):
// retrying the same call will fail the same way.
func Refused(err error) bool {
	var ce *redmap.CommandError
	return errors.As(err, &ce)
}

// Addr says where c connects, for an error that must name it: a server's
// address, a Cluster's seed addresses, or a Sentinel-managed master's name.
// It never holds a password.
func Addr(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "the Cluster at " + strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		return "the ring " + fmt.Sprint(c.Options().Addrs)
	}
	return fmt.Sprintf("%T", c)
}
