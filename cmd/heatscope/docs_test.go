package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestWalkthroughMatchesTheScenario checks that docs/walkthrough.md gives
// cpu-zombies' defaults as main.go sets them, and the command line its
// screenshots come from as the scenario's test runs it.
func TestWalkthroughMatchesTheScenario(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	doc := read("../../docs/walkthrough.md")
	main := read("../../scenarios/cpu-zombies/main.go")
	test := read("../../scenarios/cpu-zombies/scenario_test.go")
	for _, def := range []struct{ flag, value, text string }{
		{"cgroups", "2000", "creates 2000 cgroups"},
		{"burst", "1500*time.Millisecond", "in 1.5 s bursts"},
		{"interval", "4*time.Second", "bursts 4 s apart"},
		{"inject-every", "2", "a reset line after every second burst"},
	} {
		if !regexp.MustCompile(`"` + def.flag + `", ` + regexp.QuoteMeta(def.value) + `,`).MatchString(main) {
			t.Errorf("cpu-zombies' -%s default is no longer %s: update docs/walkthrough.md (%q)", def.flag, def.value, def.text)
		}
		if !strings.Contains(strings.Join(strings.Fields(doc), " "), def.text) {
			t.Errorf("docs/walkthrough.md does not say %q", def.text)
		}
	}
	m := regexp.MustCompile("`cpu-zombies ([^`]+)`").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/walkthrough.md names no cpu-zombies command line")
	}
	args := strings.Fields(m[1])
	for i := 0; i+1 < len(args); i += 2 {
		flag, value := args[i], args[i+1]
		switch flag {
		case "-cpu":
			if !strings.Contains(test, `"-cpu", fmt.Sprint(pinnedCPU)`) || !strings.Contains(test, "pinnedCPU = "+value) {
				t.Errorf("the scenario's test does not pin to CPU %s", value)
			}
			continue
		case "-bursts": // runBursts's argument, which the fleet scenario sets per node
			if !strings.Contains(test, `"-bursts", fmt.Sprint(bursts)`) || !strings.Contains(test, "runBursts(t, scenario, tag, "+value+")") {
				t.Errorf("the scenario's test does not run %s bursts", value)
			}
			continue
		}
		if !strings.Contains(test, `"`+flag+`", "`+value+`"`) {
			t.Errorf("docs/walkthrough.md says the screenshots come from %s %s; the scenario's test runs otherwise", flag, value)
		}
	}
}
