package redisbroker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Probe checks that Redis lets this connection run every command redmap
// needs, on throwaway keys in the queue's slot and in the object cache's key
// space, and returns a *failure.CommandError naming each refused command; nil
// if all are allowed. Four round trips: EVAL and EVALSHA of probe.lua, a
// pipeline of the commands redmap sends outside scripts (RPUSH, BLMOVE and
// BLPOP on a list that is not empty, HMGET), and an empty MULTI/EXEC. Errors that are
// not refusals (Redis unreachable) are returned as they are.
func (r *Broker) Probe(ctx context.Context) error {
	id := id.New()
	var rf refusals
	if err := r.probeScripts(ctx, id, &rf); err != nil {
		return err
	}
	if err := r.probeCommands(ctx, r.base+"probe:"+id+":bl", &rf); err != nil {
		return err
	}
	return rf.err()
}

// refusals are the commands a probe found refused, and Redis's replies
// ("<command>: <reply>").
type refusals struct{ cmds, replies []string }

// note records command cmd's error err if it is a refusal, and returns
// another error (Redis unreachable, say) as it is.
func (rf *refusals) note(cmd string, err error) error {
	if err == nil {
		return nil
	}
	ce := refused("probe", nil, cmd, err)
	if ce == nil {
		return wrap("probe", nil, cmd, err)
	}
	rf.add(ce.Command + ": " + ce.Reply)
	return nil
}

// add records a refusal, as "<command>: <reply>".
func (rf *refusals) add(reply string) {
	name, _, _ := strings.Cut(reply, ": ")
	rf.cmds = append(rf.cmds, name)
	rf.replies = append(rf.replies, reply)
}

// err is the probe's *failure.CommandError naming each refused command,
// nil if none was: of kind ErrPermission if a reply says a permission is
// missing, else ErrRefused.
func (rf *refusals) err() error {
	if len(rf.cmds) == 0 {
		return nil
	}
	kind := failure.ErrRefused
	for _, rep := range rf.replies {
		if strings.Contains(rep, "NOPERM") || strings.Contains(rep, "can't run") || strings.Contains(rep, "can't access") || strings.Contains(rep, "no permissions") {
			kind = failure.ErrPermission
		}
	}
	return &failure.CommandError{Op: "checking Redis permissions", Command: strings.Join(dedupe(rf.cmds), ", "),
		Reply: strings.Join(rf.replies, "; "), Kind: kind}
}

// probeScripts runs probe.lua by EVAL on a key in the queue's slot, then
// by EVALSHA on one in the object cache's key space, and records what it
// or the script's own calls were refused.
func (r *Broker) probeScripts(ctx context.Context, id string, rf *refusals) error {
	out, err := probeScript.Eval(ctx, r.c, []string{r.base + "probe:" + id}).StringSlice()
	if err := rf.note("EVAL", err); err != nil {
		return err
	}
	for _, o := range out {
		rf.add(o)
	}
	out, err = probeScript.EvalSha(ctx, r.c, []string{keys.Object(r.prefix, "probe-"+id) + ":x"}).StringSlice()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return nil // EVAL was refused, so the script was never loaded
	}
	if err := rf.note("EVALSHA", err); err != nil {
		return err
	}
	for _, o := range out {
		rf.add(o)
	}
	return nil
}

// probeCommands runs, on list l, the commands redmap sends outside
// scripts (a pipeline of RPUSH, BLMOVE and BLPOP on a list that is not
// empty, HMGET), then an empty MULTI/EXEC, and records what was refused.
func (r *Broker) probeCommands(ctx context.Context, l string, rf *refusals) error {
	cmds, _ := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, l, "1", "2")
		p.BLMove(ctx, l, l, "LEFT", "LEFT", time.Second)
		p.BLPop(ctx, time.Second, l)
		p.HMGet(ctx, l+":h", "f")
		p.Del(ctx, l)
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			if err := rf.note(strings.ToUpper(c.Name()), err); err != nil {
				return err
			}
		}
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.PTTL(ctx, l)
		return nil
	})
	return rf.note("MULTI or EXEC", err)
}

func dedupe(xs []string) []string {
	seen := make(map[string]bool, len(xs))
	out := xs[:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// PublishError writes msg as the "error" field of worker wid's info, living
// lease, for operators, when its heartbeat fails; best effort.
func (r *Broker) PublishError(ctx context.Context, p *broker.PublishErrorParams) {
	key := keys.WorkerInfo(r.prefix, r.queue, p.Worker)
	_, _ = r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, wire.InfoError, p.Msg)
		pipe.PExpire(ctx, key, p.Lease)
		return nil
	})
}

// Ping checks that Redis answers. One round trip.
func (r *Broker) Ping(ctx context.Context) error {
	return wrap("ping", nil, "PING", r.c.Ping(ctx).Err())
}

// ServerInfo is what redmap checks of a server before it serves.
type ServerInfo struct {
	Version string // redis_version, such as "7.0.15"
	Policy  string // maxmemory_policy, such as "noeviction"
}

// MinVersion is the oldest Redis redmap runs on: LPOP with a count, which
// take.lua uses, came in 6.2.
const MinVersion = "6.2"

// Server reads the server's version and maxmemory policy with INFO; a user
// without INFO (it is in @dangerous) gets a *failure.CommandError, which
// callers may ignore: the check is advice. One round trip.
func (r *Broker) Server(ctx context.Context) (ServerInfo, error) {
	var s ServerInfo
	info, err := r.c.Info(ctx).Result()
	if err != nil {
		return s, wrap("server info", nil, "INFO", err)
	}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case !ok:
		case k == "redis_version":
			s.Version = v
		case k == "maxmemory_policy":
			s.Policy = v
		}
	}
	return s, nil
}

// TooOld reports whether version is older than MinVersion.
func TooOld(version string) bool {
	var maj, min int
	if _, err := fmt.Sscanf(version, "%d.%d", &maj, &min); err != nil {
		return false // not a version we can read: let the commands say
	}
	return maj < 6 || maj == 6 && min < 2
}

// badTLS reports whether err is a TLS handshake that failed on a certificate:
// the client did not trust the server's, or the server wanted one from the
// client (tls-auth-clients) or refused it.
func badTLS(err error) bool {
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &unknown) ||
		errors.As(err, &host) || errors.As(err, &invalid) || strings.Contains(err.Error(), "remote error: tls: ")
}

// Preflight is what a worker or a manager checks before it serves: that Redis
// answers (trying again, with backoff, for up to budget: 0 for one try), that
// it allows every command redmap needs (Probe), that it is recent enough, and
// that its maxmemory-policy cannot evict redmap's keys (a warning on log if
// it can). A refusal (a bad DB index, a missing permission) is returned at
// once as a *failure.CommandError; an unreachable Redis, once budget is spent.
// A Redis that answers PING but whose probe fails with a transient error (a
// Cluster whose nodes do not yet agree, CLUSTERDOWN while a master's replica
// is promoted, a node of the queue's slot unreachable, LOADING) is an outage
// being healed: it is retried for up to heal instead (if longer). Once it
// passes, it names the queue in the index of queues (see Heartbeat).
func (r *Broker) Preflight(ctx context.Context, p *broker.PreflightParams) error {
	if err := r.awaitProbe(ctx, p); err != nil {
		return err
	}
	if err := r.checkServer(ctx, p.Log); err != nil {
		return err
	}
	// Named before the first task is queued: operators find the queue
	// from then on.
	r.nameQueue(ctx)
	return nil
}

// awaitProbe waits until Redis answers PING and passes the Probe, as
// Preflight says: it tries again, with backoff, while an outage may heal.
func (r *Broker) awaitProbe(ctx context.Context, p *broker.PreflightParams) error {
	start := time.Now()
	deadline := start.Add(p.Budget)
	var bo backoff.Backoff
	var cause error // the last error that says why, not that time ran out
	for {
		pctx, cancel := context.WithTimeout(ctx, max(min(time.Until(deadline), 2*time.Second), time.Second))
		err := r.Ping(pctx)
		cancel()
		if err == nil {
			// A Cluster's nodes agree some seconds after the first says
			// ok, and a failover puts it down for a moment: the probe's
			// CLUSTERDOWN, TRYAGAIN or LOADING is an outage healing.
			deadline = start.Add(max(p.Budget, p.Heal))
			if err = r.Probe(ctx); err == nil || !broker.Transient(err) {
				return err
			}
		}
		if broker.Refused(err) || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			cause = err
		}
		if badTLS(err) { // a certificate does not heal by waiting
			return fmt.Errorf("TLS with Redis failed: %w", err)
		}
		if time.Now().After(deadline) {
			if deadline, err = r.outOfTime(ctx, p, start, deadline, err, cause); err != nil {
				return err
			}
			continue
		}
		p.Log.Info("Redis does not answer yet; trying again", "err", err)
		if !bo.Wait(ctx) {
			return err
		}
	}
}

// outOfTime is what a Preflight does once its deadline passed with err
// (cause: the last error that said why): if Redis takes connections but
// its PING only ran out of time, it waits for up to heal from start, as
// for an outage healing, and returns the new deadline; else it gives up
// with broker.ErrNoAnswer.
func (r *Broker) outOfTime(ctx context.Context, p *broker.PreflightParams, start, deadline time.Time, err, cause error) (time.Time, error) {
	// go-redis retries a refused dial until the deadline, so the error is
	// often only that: say what it means, and why, if one dial says.
	dialled, dial := dialCause(ctx, r.c)
	if cause == nil && dial != nil {
		cause = fmt.Errorf("ping: %w", dial)
	}
	// A PING that only ran out of time while Redis takes connections:
	// Redis is there, slow (a starved machine, a pool busy with many
	// managers' calls). It gets heal, as an outage healing does, rather
	// than the budget for one that is gone.
	timedOut := broker.Slow(err) || errors.Is(err, context.DeadlineExceeded)
	if timedOut && dialled && dial == nil && deadline.Before(start.Add(p.Heal)) {
		p.Log.Info("Redis takes connections but did not answer PING in time; waiting for it", "err", err)
		return start.Add(p.Heal), nil
	}
	// The budget that applied: budget, or heal once PING answered.
	return deadline, fmt.Errorf("%w within %v: %w", broker.ErrNoAnswer, max(deadline.Sub(start), time.Second), cmp.Or(cause, err))
}

// checkServer checks the server's version and maxmemory-policy (Server):
// an error if it is older than MinVersion; a warning on log if its policy
// may evict redmap's keys.
func (r *Broker) checkServer(ctx context.Context, log *slog.Logger) error {
	s, err := r.Server(ctx)
	switch {
	case err != nil:
		log.Debug("cannot read the server's version and maxmemory-policy; not checked", "err", err)
	case TooOld(s.Version):
		return &failure.CommandError{Op: "checking Redis", Reply: "Redis " + s.Version + " is older than " + MinVersion + ", which redmap needs", Kind: failure.ErrRefused}
	case s.Policy == "":
		// The server's INFO has no policy (miniredis, some proxies): there
		// is nothing to warn of.
		log.Debug("the server reports no maxmemory-policy; not checked")
	case s.Policy != "noeviction":
		log.Warn("Redis's maxmemory-policy may evict redmap's keys when memory is full, and work would be lost and redone; set maxmemory-policy noeviction",
			"maxmemory_policy", s.Policy)
	}
	return nil
}

// dialCause dials a single server's client's address once, for why its
// pings ran out of time (go-redis retries a refused dial until the ping's
// deadline, which leaves only that to say): whether it dialled (c is a
// single server's client), and the dial's error, nil if it connected.
func dialCause(ctx context.Context, c redis.UniversalClient) (dialled bool, err error) {
	cl, ok := c.(*redis.Client)
	if !ok {
		return false, nil
	}
	o := cl.Options()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	dial := o.Dialer
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, cmp.Or(o.Network, "tcp"), o.Addr)
	if err != nil {
		return true, err
	}
	conn.Close()
	return true, nil
}
