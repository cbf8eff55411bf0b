package idents

import "github.com/redmap/redmap"

// The handles both sides register and call.
var (
	Counts     = redmap.Emit("pyindex.counts", CountFile)
	Index      = redmap.Emit("pyindex.index", IndexFile)
	SumCounts  = redmap.Reduce("pyindex.sum", Sum)
	UnionFiles = redmap.Reduce("pyindex.union", Union)

	FoldCounts     = redmap.Func("pyindex.fold-counts", CountsOf)
	FoldIndex      = redmap.Func("pyindex.fold-index", IndexOf)
	MergeCountMaps = redmap.Reduce("pyindex.merge-counts", MergeCounts)
	MergeIndexMaps = redmap.Reduce("pyindex.merge-index", MergeIndex)
)
