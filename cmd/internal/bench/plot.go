package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours of the plot: idem's variants, the floors, and the two latencies.
var (
	colorVariant = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorFloor   = color.RGBA{R: 0xa0, G: 0xa0, B: 0xa0, A: 0xff}
	colorP50     = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorP99     = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
)

// Size of the plot: two panels side by side, each at least plotWidth/2
// wide and wider with many variants, so that their rotated names do not
// run into each other.
const (
	plotWidth       = 26 * vg.Centimeter
	plotHeight      = 10 * vg.Centimeter
	plotPerVariant  = 1.6 * vg.Centimeter // of each panel
	plotRightMargin = 1.5 * vg.Centimeter // for the last variant's name
)

// plotSize is the plot's width and height for n variants.
func plotSize(n int) (vg.Length, vg.Length) {
	return max(plotWidth, 2*vg.Length(n)*plotPerVariant+plotRightMargin), plotHeight
}

// WritePlot draws rep as an SVG image on w, as `idem bench --plot` does:
// on the left, each variant's throughput as a ratio to bare, the floor
// variants in grey and each also a dashed line across, to read the others
// against; on the right, each variant's p50 and p99 latency. The conflict
// variant, whose requests are duplicates answered 409, has no throughput
// bar, only its latencies.
func WritePlot(w io.Writer, rep Report) error {
	if len(rep.Order) == 0 {
		return errors.New("bench: nothing to plot")
	}
	c := vgsvg.New(plotSize(len(rep.Order)))
	if err := drawReport(draw.New(c), rep); err != nil {
		return err
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("bench: write plot: %w", err)
	}
	return nil
}

// drawReport draws the two panels of rep on dc.
func drawReport(dc draw.Canvas, rep Report) error {
	ratio, err := ratioPlot(rep)
	if err != nil {
		return err
	}
	latency, err := latencyPlot(rep)
	if err != nil {
		return err
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: plotRightMargin}
	plots := [][]*plot.Plot{{ratio, latency}}
	canvases := plot.Align(plots, tiles, dc)
	ratio.Draw(canvases[0][0])
	latency.Draw(canvases[0][1])
	return nil
}

// ratioPlot is the left panel: throughput as a ratio to bare.
func ratioPlot(rep Report) (*plot.Plot, error) {
	var names []string
	var variants, floors plotter.Values
	for _, name := range rep.Order {
		if name == Conflict {
			continue
		}
		names = append(names, name)
		r := rep.Variants[name].Ratio
		if slices.Contains(FloorVariants, name) {
			variants, floors = append(variants, 0), append(floors, r)
		} else {
			variants, floors = append(variants, r), append(floors, 0)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("bench: no throughput to plot")
	}
	p := plot.New()
	p.Title.Text = "Throughput, ratio to bare"
	p.Y.Label.Text = "ratio"
	p.Y.Tick.Marker = roundTicks{}
	p.Y.Min = 0
	p.NominalX(names...)
	tiltLabels(p)
	width := barWidth(len(names))
	ours, err := plotter.NewBarChart(variants, width)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	ours.Color, ours.LineStyle.Width = colorVariant, 0
	floor, err := plotter.NewBarChart(floors, width)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	floor.Color, floor.LineStyle.Width = colorFloor, 0
	p.Add(plotter.NewGrid(), ours, floor)
	values := plotter.XYLabels{}
	for i := range names {
		r := variants[i] + floors[i]
		values.XYs = append(values.XYs, plotter.XY{X: float64(i), Y: r})
		values.Labels = append(values.Labels, strconv.FormatFloat(r, 'f', -1, 64)+"x") // as --json has it
	}
	labels, err := plotter.NewLabels(values)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].XAlign = draw.XCenter
		labels.TextStyle[i].Font.Size = vg.Points(8)
	}
	labels.Offset = vg.Point{Y: vg.Points(2)}
	p.Add(labels)
	for _, r := range floors {
		if r == 0 {
			continue
		}
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: r}, {X: float64(len(names)) - 0.5, Y: r}})
		if err != nil {
			return nil, fmt.Errorf("bench: plot: %w", err)
		}
		line.Color = colorFloor
		line.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(line)
	}
	p.Y.Max = headroom(slices.Max(variants), slices.Max(floors))
	p.Legend.Add("idem", ours)
	p.Legend.Add("floor", floor)
	p.Legend.Top = true
	return p, nil
}

// latencyPlot is the right panel: p50 and p99 latency per variant.
func latencyPlot(rep Report) (*plot.Plot, error) {
	var p50, p99 plotter.Values
	for _, name := range rep.Order {
		v := rep.Variants[name]
		p50, p99 = append(p50, v.P50), append(p99, v.P99)
	}
	p := plot.New()
	p.Title.Text = "Latency"
	p.Y.Label.Text = "ms"
	p.Y.Tick.Marker = roundTicks{}
	p.Y.Min = 0
	p.NominalX(rep.Order...)
	tiltLabels(p)
	width := barWidth(len(rep.Order)) / 2
	bars50, err := plotter.NewBarChart(p50, width)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	bars50.Color, bars50.LineStyle.Width, bars50.Offset = colorP50, 0, -width/2
	bars99, err := plotter.NewBarChart(p99, width)
	if err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	bars99.Color, bars99.LineStyle.Width, bars99.Offset = colorP99, 0, width/2
	p.Add(plotter.NewGrid(), bars50, bars99)
	p.Y.Max = headroom(slices.Max(p99), slices.Max(p50))
	p.Legend.Add("p50", bars50)
	p.Legend.Add("p99", bars99)
	p.Legend.Top = true
	return p, nil
}

// headroom returns the top of a panel's axis whose highest bar is the
// larger of a and b, with room above it for the legend, rounded up.
func headroom(a, b float64) float64 {
	top := max(a, b) * 1.25
	if top <= 0 {
		return 1
	}
	// Up to a round number, for round ticks.
	step := math.Pow(10, math.Floor(math.Log10(top))) / 2
	return math.Ceil(top/step) * step
}

// barWidth is the width of one variant's bar in a panel of n variants.
func barWidth(n int) vg.Length {
	return min(vg.Centimeter, (plotWidth/2-2*vg.Centimeter)/vg.Length(max(n, 1))*0.7)
}

// roundTicks is the default ticker with its labels written in at most
// four significant digits and no trailing zeros: 25, not 25.00.
type roundTicks struct{}

// Ticks returns the default ticks of [min, max] with shorter labels.
func (roundTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'g', 4, 64)
		}
	}
	return ticks
}

// tiltLabels slants the variant names so that long ones do not overlap.
func tiltLabels(p *plot.Plot) {
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
}
