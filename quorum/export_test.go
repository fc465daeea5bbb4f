package quorum

// SetBeforeCount makes every attempt of l run f after its answers are in
// and before they are counted.
func SetBeforeCount(l *Locker, f func()) { l.beforeCount = f }

// SetAfterTry makes deployment i's part of every attempt of l run f(i)
// after its TryLock returned and before its answer is counted.
func SetAfterTry(l *Locker, f func(i int)) { l.afterTry = f }
