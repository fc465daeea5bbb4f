package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// MachineCPU is the CPU time all processors of the machine spent outside
// idle and iowait since boot, from /proc/stat (0 where there is none):
// this process, the Redis nodes, worker processes and every other
// program alike. Its change over a cell's timed window, over the window's
// length, is how many cores the machine kept busy meanwhile
// (Result.MachineBusy): a ratio of two cells' batches/s measured while
// the machine had no CPU to spare says what the machine can do, not what
// the protocol could.
func MachineCPU() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		var busy int64
		for i, v := range fields[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			// user nice system idle iowait irq softirq steal guest guest_nice;
			// guest time is already counted in user.
			if i == 3 || i == 4 || i >= 8 {
				continue
			}
			busy += n
		}
		// USER_HZ is 100 on every Linux this runs on.
		return time.Duration(busy) * 10 * time.Millisecond
	}
	return 0
}

// busySince is the cores the machine kept busy since m0 (MachineCPU) was
// read at start; 0 when /proc/stat is not there.
func busySince(m0 time.Duration, start time.Time) float64 {
	m1, wall := MachineCPU(), time.Since(start)
	if m0 == 0 || m1 == 0 || wall <= 0 {
		return 0
	}
	return (m1 - m0).Seconds() / wall.Seconds()
}
