package web

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
)

// TestBrowserCompactDecoder checks the UI's decoder of the compact
// encoding (flame.js's fetchTree and decodeTree) in the browser: for
// flame graphs and a differential one, over names with quotes, HTML and
// non-ASCII characters, the decoded tree must be the nested JSON answer,
// both through typed arrays and through the DataView path of big-endian
// machines; API errors and damaged encodings (a differential not in CPU
// nanoseconds among them) must be errors.
func TestBrowserCompactDecoder(t *testing.T) {
	db := testStore(t)
	if _, err := db.Import("fixture", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(uiPerfScript()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, db, Options{})
	b := newBrowser(t)
	b.run("open the page", chromedp.Navigate(fx.url+"/"), settled)

	targets := [][2]string{
		{"/api/flamegraph", queryA},
		{"/api/flamegraph", queryA + "&source=capture&stack=user"},
		{"/api/flamegraph", "from=1795237380&to=1795237480&source=fixture"}, // xssName
		{"/api/flamegraph", queryA + "&frame=no_such_function"},             // the root alone, and a message
		{"/api/diff", queryA + "&from2=1795237382.5&to2=1795237389.75"},
		{"/api/diff", queryA + "&from2=1795237382.5&to2=1795237389.75&source=capture"},
	}
	list, _ := json.Marshal(targets)
	js := fmt.Sprintf(`(async () => {
		const m = await import('/ui/flame.js');
		// nest rebuilds the API's nested JSON from a decoded tree (a
		// differential's CPU nanoseconds in seconds)
		const nest = (t) => {
			const num = t.diff ? ['a', 'b', 'selfA', 'selfB', 'delta', 'deltaTotal'] : ['value', 'self', 'cpu', 'selfCpu'];
			const scale = t.diff ? 1e9 : 1;
			const build = (i) => {
				const o = { name: t.names[t.name[i]], kind: t.kinds[t.kind[i]] };
				for (const c of num) o[c] = t[c][i] / scale;
				if (!t.diff && t.fp[i] > 0) o.fp = t.fp[i]; // the nested JSON leaves 0 out
				const kids = [];
				for (let c = i + 1, end = i + t.size[i]; c < end; c += t.size[c]) kids.push(build(c));
				if (kids.length) o.children = kids;
				return o;
			};
			return t.diff ? { unit: 'cpu-seconds', totalA: t.totalA / 1e9, totalB: t.totalB / 1e9, samplesA: t.samplesA, samplesB: t.samplesB,
				message: t.message, root: t.n ? build(0) : null } : { ...build(0), message: t.message };
		};
		const out = [];
		for (const [path, query] of %s) {
			const params = new URLSearchParams(query);
			const t = await m.fetchTree(path, params);
			params.set('encoding', 'compact');
			const buf = await (await fetch(path + '?' + params)).arrayBuffer();
			out.push([JSON.stringify(nest(t)), JSON.stringify(nest(m.decodeTree(buf, false))), String(t.n)]);
		}
		return out;
	})()`, list)
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[[][]string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(targets) {
		t.Fatalf("%d answers for %d targets", len(got), len(targets))
	}
	for i, tc := range targets {
		resp, want := fx.get(t, tc[0]+"?"+tc[1])
		mustOK(t, tc[0], resp, want)
		if !sameJSON(t, []byte(got[i][0]), want) || !sameJSON(t, []byte(got[i][1]), want) {
			t.Fatalf("%s?%s: decoded in the browser\n%.300s\nthrough a DataView\n%.300s\nwant\n%.300s", tc[0], tc[1], got[i][0], got[i][1], want)
		}
		t.Logf("%s?%s: %s nodes", tc[0], tc[1], got[i][2])
	}
	for _, name := range []string{xssName, `ns::Work<T&, \"q\">::naïve_3`} {
		if !strings.Contains(got[2][0]+got[1][0], name) {
			t.Errorf("no frame %s in the decoded trees: the test proves less than it says", name)
		}
	}

	// Errors: the API's message, and damaged encodings (short, wrong magic,
	// a subtree past the end, a name out of the table).
	errs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`(async () => {
		const m = await import('/ui/flame.js');
		const out = [];
		try { await m.fetchTree('/api/flamegraph', new URLSearchParams('from=x&to=1')); out.push('no error'); } catch (e) { out.push(e.message); }
		const good = new Uint8Array(await (await fetch('/api/flamegraph?%s&encoding=compact')).arrayBuffer());
		const view = new DataView(good.buffer);
		const n = view.getUint32(4, true);
		const cols = ((16 + view.getUint32(8, true) + 7) & ~7) + 5 * 8 * n; // the name column, after five float64 columns
		const damaged = [good.slice(0, good.length - 1), good.slice(0, 10), good.slice(), good.slice(), good.slice(), good.slice()];
		damaged[2][3] = 0x58; // "HSFX"
		new DataView(damaged[3].buffer).setUint32(cols + 4 * n + 4, n, true); // node 1's subtree size
		new DataView(damaged[4].buffer).setUint32(cols + 4, 1 << 30, true); // node 1's name
		new DataView(damaged[5].buffer).setUint32(8, 1 << 30, true); // the JSON header's length
		// a differential whose unit is not CPU nanoseconds
		const diff = new Uint8Array(await (await fetch('/api/diff?%s&from2=1795237382.5&to2=1795237389.75&encoding=compact')).arrayBuffer());
		const unit = [...new TextEncoder().encode('"unit":"cpu-nanoseconds"')];
		const at = diff.findIndex((_, i) => unit.every((c, j) => diff[i + j] === c));
		diff[at + unit.length - 2] = 0x7a; // "cpu-nanosecondz"
		damaged.push(diff);
		for (const d of damaged) {
			try { m.decodeTree(d.buffer); out.push('decoded'); } catch (e) { out.push(e.message); }
		}
		out.push(String(m.decodeTree(good.buffer).n === n && n > 1));
		return out;
	})()`, queryA, queryA), chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 9 || !strings.HasPrefix(errs[0], "from: ") || errs[8] != "true" {
		t.Fatalf("errors %q", errs)
	}
	for i, msg := range errs[1:8] {
		if !strings.Contains(msg, "bad compact encoding") {
			t.Errorf("damaged encoding %d: %q", i, msg)
		}
	}
}
