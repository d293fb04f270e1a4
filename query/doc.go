// Package query turns the samples a store selects into the views heatscope
// shows: the FlameScope subsecond heatmap, flame graph trees and their
// differential, top functions, and pprof profiles. Every view takes a time
// range and a store.Filter, so one filter applies to all of them.
package query
