package cpulist

import (
	"fmt"
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
		{in: "0-65535", want: seq(65536)},
		{in: "0-65536", bad: true},
		// 4 KB of ranges that asked for 1.4 GB before the bound was the
		// whole list's (the API's cpu= parameter reaches here).
		{in: strings.Repeat("0-65535,", 500) + "0", bad: true},
		{in: "0-32767,0-32767", want: append(seq(32768), seq(32768)...)},
		{in: "0-32767,0-32768", bad: true},
	} {
		got, err := Parse(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("Parse(%.40q) = %s, want an error", tc.in, short(got))
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%.40q) = %s, %v; want %s", tc.in, short(got), err, short(tc.want))
		}
	}
}

// FuzzParse parses any list: an error naming the list, or at most
// maxCPUs CPUs, none of them negative, that read back the same when
// written one by one.
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
		if len(cpus) > maxCPUs {
			t.Fatalf("Parse(%q): %d CPUs, more than %d", s, len(cpus), maxCPUs)
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

// seq is 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// short shows a list of CPUs, or how many for a long one.
func short(cpus []int) string {
	if len(cpus) > 16 {
		return fmt.Sprintf("%d CPUs", len(cpus))
	}
	return fmt.Sprint(cpus)
}
