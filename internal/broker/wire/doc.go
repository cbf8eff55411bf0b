// Package wire holds what redmap's processes exchange through Redis, in
// their own words: the messages of the task protocol (a task submitted,
// taken, finished; what a take, a heartbeat or a reap reports), the records
// kept for operators (a worker's info, a batch's progress and final record,
// failure groups) and the entries of a manager's result list, each record
// with the one pair of functions that writes and reads it.
//
// It is the neutral ground between internal/broker/redisbroker, which alone sends Redis
// commands, and the manager, the worker and the operators' tools, which
// see Redis through seams typed in this package (as asynq's internal/base
// sits between its broker and its processor). It sends nothing itself.
package wire
