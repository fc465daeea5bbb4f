package main

import _ "embed"

// k100Notes is a measurement made apart from make bench (old and new
// builds alternated against one cluster), kept in the report it explains:
// where slotlock's own time goes at K = 100 on loopback. Its numbers are
// its own run's, and it says so.
//
//go:embed k100.md
var k100Notes string
