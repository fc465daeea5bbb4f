package quorum

// SetBeforeCount makes every attempt of l run f after its answers are in
// and before they are counted.
func SetBeforeCount(l *Locker, f func()) { l.beforeCount = f }
