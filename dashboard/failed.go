package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
)

// maxBatchID bounds the batch id api/failed takes: every key name built
// from a request is bounded.
const maxBatchID = 256

// serveFailed answers GET api/failed?queue=Q&batch=ID with the failed
// elements of ended batch ID of queue Q, as JSON (inspect.FailedElements:
// index, kind, error, attempts, worker of each, the first 1,000 by index,
// and how many more failed), for as long as the queue's history holds the
// batch's record; 404 if it holds neither the record nor a list. Each
// ended batch with failures links to it on the page.
func (d *Dashboard) serveFailed(w http.ResponseWriter, r *http.Request) {
	if d.opts.Private && !d.authorized(r) {
		unauthorized(w, r, "reading a batch's failed elements")
		return
	}
	queue, batch := r.URL.Query().Get("queue"), r.URL.Query().Get("batch")
	if queue == "" || batch == "" || len(batch) > maxBatchID {
		http.Error(w, "dashboard: api/failed takes ?queue=Q&batch=ID", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.opts.ReadTimeout)
	defer cancel()
	fs, err := d.in.FailedElements(ctx, queue, batch)
	if err != nil {
		d.opts.Logger.Warn("reading a batch's failed elements failed", "queue", queue, "batch", batch, "err", err)
		http.Error(w, "dashboard: reading Redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	if !fs.InRecord && len(fs.Elements) == 0 && fs.Omitted == 0 {
		http.Error(w, "dashboard: no ended batch "+batch+" in the history of queue "+queue, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(fs)
}
