package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/keys"
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

// refused returns err as a *failure.CommandError if it is an error reply that
// retrying does not heal: neither transient nor out of memory. op says what
// redmap was doing; s is the script that ran (nil for a plain command) and
// cmd the command sent, used when the reply does not name one.
func refused(op string, s *script, cmd string, err error) *failure.CommandError {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) || broker.Transient(err) || broker.OutOfMemory(err) {
		return nil
	}
	msg := reply.Error()
	ce := &failure.CommandError{Op: op, Reply: msg, Kind: failure.ErrRefused}
	switch first, _, _ := strings.Cut(msg, " "); {
	case first == "NOPERM" || first == "NOAUTH" || first == "WRONGPASS",
		strings.Contains(msg, "can't run this command"), strings.Contains(msg, "can't access at least one of the keys"):
		ce.Kind = failure.ErrPermission
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

// wrap says what failed: a *failure.CommandError for a refusal, else err
// prefixed with op.
func wrap(op string, s *script, cmd string, err error) error {
	if err == nil {
		return nil
	}
	if fe := fenced(op, err); fe != nil {
		return fe
	}
	if ce := refused(op, s, cmd, err); ce != nil {
		return ce
	}
	return fmt.Errorf("%s: %w", op, err)
}

// onKey names key in err if it is a refusal for data of the wrong type: a
// call whose every other key is set aside when it holds foreign data (see
// set_aside in prelude.lua) says which key stopped it.
func onKey(err error, key string) error {
	var ce *failure.CommandError
	if errors.As(err, &ce) && strings.HasPrefix(ce.Reply, "WRONGTYPE") {
		ce.Key = key
	}
	return err
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

// setAside answers err, the error of a read of manager mid's results: if
// Redis refused it for data of the wrong type, the manager's result list,
// staged results and kept list are set aside where they hold another type
// (aside.lua), and the error says so and is Transient (also when none does
// any more: another client set it aside first); otherwise err. A refusal
// that keeps coming is bounded as every Transient error is, by the
// manager's outage bound.
func (r *Broker) setAside(ctx context.Context, mid string, err error) error {
	var ce *failure.CommandError
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Reply, "WRONGTYPE") {
		return err
	}
	n, aerr := asideScript.run(ctx, r.c, []string{keys.Results(r.prefix, r.queue, mid), keys.Staged(r.prefix, r.queue, mid),
		keys.Kept(r.prefix, r.queue, mid)}, "list", "hash", "list").Int()
	if aerr != nil {
		return err
	}
	// n is 0 when another client (a worker's publish, another read of
	// this manager) set the key aside between the refusal and aside.lua:
	// the read, made again, finds it absent all the same.
	return fmt.Errorf("%w: %d of the manager's keys held another type (%v)", broker.ErrSetAside, n, err)
}

// asideOnce runs do, a plain command (or pipeline) on key; if Redis refused
// it because key holds foreign data (another type), it sets key aside
// (aside.lua; typ is the type key must have: "list", "hash", "set" or
// "zset"), logged in Redis's log, and runs do once more on the key, now
// absent. For keys a script would set aside too (guarded in
// prelude.lua): a record, a lease, a counter, a bell, what is rebuilt.
func (r *Broker) asideOnce(ctx context.Context, key, typ string, do func() error) error {
	err := do()
	if err == nil || !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return err
	}
	if _, aerr := asideScript.run(ctx, r.c, []string{key}, typ).Result(); aerr != nil {
		return err
	}
	return do()
}

// SetAsideTasks answers err, what a call on manager mid's behalf met: if
// Redis refused it because mid's task set holds foreign data (a
// *failure.CommandError naming the key), the set is set aside (aside.lua)
// and SetAsideTasks reports true. The caller has failed every task the set
// held first: its payloads and the truth of what is outstanding went with
// the foreign write. The manager's next submit finds no count, and its
// recoverer starts a new history (epoch) for the set.
func (r *Broker) SetAsideTasks(ctx context.Context, p *broker.SetAsideTasksParams) bool {
	mid, err := p.Manager, p.Err
	var ce *failure.CommandError
	k := keys.Tasks(r.prefix, r.queue, mid)
	if !errors.As(err, &ce) || ce.Key != k || !strings.HasPrefix(ce.Reply, "WRONGTYPE") {
		return false
	}
	_, aerr := asideScript.run(ctx, r.c, []string{k}, "hash").Result()
	return aerr == nil
}
