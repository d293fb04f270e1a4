package pysymbol

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/heatscope/heatscope/internal/rawsys"
)

// StartTime returns when process pid started, in clock ticks since boot:
// the 22nd field of procRoot/PID/stat, which with the pid names the
// process (a reused pid has another).
//
// The file is read with raw system calls into one small buffer (rawsys):
// the agent reads it for every new Python process it samples, a tenth of
// the new processes of bench/churn's case b, where os.ReadFile's open,
// fstat, reads and growing buffer were 3.7% of its CPU.
func StartTime(procRoot string, pid uint32) (uint64, error) {
	path := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "stat")
	var buf [512]byte // a stat line is about 300 bytes; ReadFile grows it if need be
	b, err := rawsys.ReadFile(path, buf[:0])
	if err != nil {
		return 0, fmt.Errorf("start time: %w", err)
	}
	return parseStartTime(b)
}

// parseStartTime reads the start time from the text of /proc/PID/stat.
// The command name, field 2, is in parentheses and may hold spaces and
// parentheses itself: the fields are counted from the last ')'.
func parseStartTime(b []byte) (uint64, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("start time: no ')' in a stat line")
	}
	fields := bytes.Fields(b[end+1:])
	// Field 3 (the state) is fields[0]: the start time, field 22, is 19 on.
	const startField = 22 - 3
	if len(fields) <= startField {
		return 0, fmt.Errorf("start time: %d fields after the command name, want over %d", len(fields), startField)
	}
	v, err := strconv.ParseUint(string(fields[startField]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("start time: %w", err)
	}
	return v, nil
}
