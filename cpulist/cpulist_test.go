package cpulist

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "0", want: []int{0}},
		{in: "0-3\n", want: []int{0, 1, 2, 3}},
		{in: "0-1,4,6-7", want: []int{0, 1, 4, 6, 7}},
		{in: "5,2", want: []int{5, 2}},
		{in: "", want: nil},
		{in: "a", bad: true},
		{in: "3-1", bad: true},
		{in: "-1", bad: true},
		{in: "1,", bad: true},
		{in: "1-", bad: true},
		{in: "0-99999999", bad: true},
	} {
		got, err := Parse(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParse parses any list: an error naming the list, or CPUs none of
// them negative, no range larger than the bound, that read back the same
// when written one by one.
// Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "0-3\n", "0-1,4,6-7", "", "3-1", "-1", "1,,2", "0-65536", "+1-+2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := Parse(s)
		if err != nil {
			if !strings.Contains(err.Error(), "CPU list") {
				t.Fatalf("Parse(%q): %v, want an error naming the CPU list", s, err)
			}
			return
		}
		if parts := strings.Count(s, ",") + 1; len(cpus) > parts*(maxRange+1) {
			t.Fatalf("Parse(%q): %d CPUs from %d parts", s, len(cpus), parts)
		}
		ones := make([]string, len(cpus))
		for i, c := range cpus {
			if c < 0 {
				t.Fatalf("Parse(%q): CPU %d", s, c)
			}
			ones[i] = strconv.Itoa(c)
		}
		again, err := Parse(strings.Join(ones, ","))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("Parse(%q) = %v; written one by one it reads %v, %v", s, cpus, again, err)
		}
	})
}
