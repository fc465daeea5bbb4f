package tracking

import "strings"

// HolderOf returns the holder part of a lock value, `holder ['.' fence]
// ['!']`: what a lease compares with its token (or owner token). It is the
// Go twin of holder_of in batch/scripts/common.lua, where the format is
// defined; tokens never contain '.' or '!'.
func HolderOf(v string) string {
	if i := strings.IndexAny(v, ".!"); i >= 0 {
		return v[:i]
	}
	return v
}
