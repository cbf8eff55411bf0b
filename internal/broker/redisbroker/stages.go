package redisbroker

import (
	"context"
	"encoding/json"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// RestoreStages puts back what Redis lost of pipeline p.Pipeline's stage
// counts (keys.Stages), from p.Stages, those its manager counted of the
// batches of it it recorded: each count below the manager's is raised to
// it, none lowered (stages.lua). One script call, none for no stage.
func (r *Broker) RestoreStages(ctx context.Context, p *broker.RestoreStagesParams) error {
	if len(p.Stages) == 0 {
		return nil
	}
	b, err := json.Marshal(p.Stages)
	if err != nil {
		return err
	}
	if err := stagesScript.run(ctx, r.c, []string{keys.Stages(r.prefix, r.queue, p.Pipeline)}, string(b)).Err(); err != nil {
		return wrap("restore stage counts", stagesScript, "", err)
	}
	return nil
}
