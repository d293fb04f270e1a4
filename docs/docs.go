// Package docs holds the documents the heatscope binary serves itself:
// the HTTP API reference, which the UI links to. (go:embed reaches no
// parent directory, so the embedding lives beside the files.)
package docs

import _ "embed"

// API is api.md, the HTTP API reference (Markdown).
//
//go:embed api.md
var API []byte
