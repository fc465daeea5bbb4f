package main

import (
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/slotlock/slotlock/bench"
)

// palette gives each contender a colour and a dash pattern of its own, the
// same in both panels; slotlock's variants are solid, the peers dashed.
var palette = map[string]struct {
	c      color.RGBA
	dashes []vg.Length
}{
	"slotlock":         {color.RGBA{0x1f, 0x77, 0xb4, 0xff}, nil},
	"slotlock-multi":   {color.RGBA{0x17, 0xbe, 0xcf, 0xff}, nil},
	"slotlock-perslot": {color.RGBA{0x94, 0x67, 0xbd, 0xff}, nil},
	"sequential-setnx": {color.RGBA{0xd6, 0x27, 0x28, 0xff}, []vg.Length{vg.Points(5), vg.Points(3)}},
	"redsync":          {color.RGBA{0xff, 0x7f, 0x0e, 0xff}, []vg.Length{vg.Points(5), vg.Points(3)}},
	"rueidislock":      {color.RGBA{0x8c, 0x56, 0x4b, 0xff}, []vg.Length{vg.Points(5), vg.Points(3)}},
	"redislock":        {color.RGBA{0xe3, 0x77, 0xc2, 0xff}, []vg.Length{vg.Points(5), vg.Points(3)}},
	"raw-pipeline":     {color.RGBA{0x44, 0x44, 0x44, 0xff}, []vg.Length{vg.Points(1), vg.Points(3)}},
}

// writeChart draws keys/s against K, log-log, one line per contender, one
// panel per round trip (one worker).
func writeChart(path string, rows []row) error {
	var panels []*plot.Plot
	for _, rtt := range bench.RTTs {
		p := plot.New()
		p.Title.Text = "RTT " + rttText(rtt) + ", W = 1"
		p.X.Label.Text = "K (keys per batch)"
		p.Y.Label.Text = "keys locked and released per second"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		// One scale for both panels, with a decade of room above the
		// lines for the legend.
		p.Y.Min, p.Y.Max = 1, 1e7
		// Fixed, so that a panel with one K (-cells) still has a range.
		p.X.Min, p.X.Max = 0.7, 1500
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		lines := 0
		for _, f := range bench.Contenders {
			var xys plotter.XYs
			for _, k := range bench.Ks {
				if r, ok := find(rows, bench.Cell{Contender: f.Name, K: k, W: 1, RTT: rtt}); ok && r.KeysPerSec() > 0 {
					xys = append(xys, plotter.XY{X: float64(k), Y: r.KeysPerSec()})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			style := palette[f.Name]
			line.Color, line.Dashes, line.Width = style.c, style.dashes, vg.Points(1.5)
			points.Color, points.Shape = style.c, draw.CircleGlyph{}
			p.Add(line, points)
			p.Legend.Add(f.Name, line, points)
			lines++
		}
		if lines == 0 {
			// No cell of this worker count ran (-cells): a panel without
			// data has no range for its log-scaled X axis.
			continue
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	const width, height = 15 * vg.Inch, 5 * vg.Inch
	c := vgsvg.New(width, height)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func find(rows []row, cell bench.Cell) (row, bool) {
	for _, r := range rows {
		if r.Cell == cell && r.Err == nil {
			return r, true
		}
	}
	return row{}, false
}
