package tracking

// Refused reports whether the Tracker gave up on CLIENT TRACKING for good.
func (t *Tracker) Refused() bool { return t.refused.Load() }
