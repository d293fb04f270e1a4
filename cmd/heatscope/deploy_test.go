package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// deployDir holds the packaging: systemd unit, Kubernetes manifests and the
// example config.
const deployDir = "../../deploy"

// yamlDocs parses every document of a multi-document YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

// dig walks nested maps and lists ("spec", "template", 0, ...).
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not a mapping", path)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestDeployKubernetes checks the DaemonSet's privileges against the
// documented capability set, its mounts, limits and probes, and the
// Service in front of it; and that its config is one record accepts.
func TestDeployKubernetes(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(deployDir, "kubernetes", "daemonset.yaml"))
	kinds := map[string]map[string]any{}
	for _, d := range docs {
		kind, _ := d["kind"].(string)
		kinds[kind] = d
		if ns := dig(t, d, "metadata", "namespace"); kind != "Namespace" && ns != "heatscope" {
			t.Errorf("%s in namespace %v, want heatscope", kind, ns)
		}
	}
	for _, k := range []string{"Namespace", "ConfigMap", "DaemonSet", "Service"} {
		if kinds[k] == nil {
			t.Fatalf("no %s in daemonset.yaml", k)
		}
	}
	ds := kinds["DaemonSet"]
	pod := dig(t, ds, "spec", "template", "spec")
	if dig(t, pod, "hostPID") != true {
		t.Error("the DaemonSet needs hostPID: true to see the node's processes")
	}
	c := dig(t, pod, "containers", 0)
	sc := dig(t, c, "securityContext")
	var caps []string
	for _, name := range strs(dig(t, sc, "capabilities", "add")) {
		caps = append(caps, "CAP_"+name)
	}
	if !slices.Equal(caps, recorderCapabilities) {
		t.Errorf("DaemonSet adds capabilities %v, want exactly %v", caps, recorderCapabilities)
	}
	if drop := strs(dig(t, sc, "capabilities", "drop")); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("DaemonSet drops %v, want ALL", drop)
	}
	if dig(t, sc, "privileged") != false || dig(t, sc, "allowPrivilegeEscalation") != false {
		t.Error("the container must not be privileged nor allow privilege escalation")
	}
	for _, r := range []string{"requests", "limits"} {
		for _, k := range []string{"cpu", "memory"} {
			if dig(t, c, "resources", r, k) == nil {
				t.Errorf("no resources.%s.%s", r, k)
			}
		}
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if p := dig(t, c, probe, "httpGet", "path"); p != "/healthz" {
			t.Errorf("%s path %v, want /healthz", probe, p)
		}
	}
	hostPaths := map[string]bool{}
	for _, v := range dig(t, pod, "volumes").([]any) {
		if hp, ok := v.(map[string]any)["hostPath"].(map[string]any); ok {
			hostPaths[hp["path"].(string)] = true
		}
	}
	for _, p := range []string{"/sys/kernel/btf", "/sys/fs/cgroup", "/var/lib/heatscope", "/tmp", "/usr/lib/debug"} {
		if !hostPaths[p] {
			t.Errorf("no hostPath volume for %s", p)
		}
	}
	// The recorder ships to the bucket of the Secret heatscope-objstore,
	// under the node's name from the downward API.
	nodeFromDownwardAPI := false
	for _, e := range dig(t, c, "env").([]any) {
		env := e.(map[string]any)
		if env["name"] == "NODE_NAME" && dig(t, env, "valueFrom", "fieldRef", "fieldPath") == "spec.nodeName" {
			nodeFromDownwardAPI = true
		}
		if strings.HasPrefix(env["name"].(string), "AWS_") && dig(t, env, "valueFrom", "secretKeyRef", "name") != "heatscope-objstore" {
			t.Errorf("%s does not come from the Secret heatscope-objstore", env["name"])
		}
	}
	if !nodeFromDownwardAPI {
		t.Error("NODE_NAME does not come from the downward API (spec.nodeName)")
	}
	objstoreMount := ""
	for _, m := range dig(t, c, "volumeMounts").([]any) {
		if mm := m.(map[string]any); mm["name"] == "objstore" {
			objstoreMount = mm["mountPath"].(string)
		}
	}
	secretVolume := false
	for _, v := range dig(t, pod, "volumes").([]any) {
		if vv := v.(map[string]any); vv["name"] == "objstore" {
			secretVolume = dig(t, vv, "secret", "secretName") == "heatscope-objstore"
		}
	}
	if !secretVolume || objstoreMount == "" {
		t.Error("no volume objstore from the Secret heatscope-objstore mounted in the container")
	}
	recordCfg, err := parseConfig([]byte(dig(t, kinds["ConfigMap"], "data", "heatscope.yaml").(string)), "record")
	if err != nil {
		t.Fatal(err)
	}
	objstoreCfg := ""
	for _, v := range recordCfg {
		if v.name == "objstore-config" {
			objstoreCfg = v.value
		}
	}
	if objstoreCfg != objstoreMount+"/objstore.yaml" {
		t.Errorf("record's objstore-config is %q, want the Secret's file %s/objstore.yaml", objstoreCfg, objstoreMount)
	}

	// The Service selects the pods and targets their port.
	svc := kinds["Service"]
	podLabels := dig(t, ds, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range dig(t, svc, "spec", "selector").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("Service selects %s=%v, the pods have %v", k, v, podLabels[k])
		}
	}
	if dig(t, svc, "spec", "ports", 0, "targetPort") != dig(t, c, "ports", 0, "name") {
		t.Error("the Service's targetPort is not the container's port")
	}

	// The config map's file is one record takes: parsing it fails only on
	// the bad --frequency given after it, not on the file.
	config := filepath.Join(t.TempDir(), "heatscope.yaml")
	if err := os.WriteFile(config, []byte(dig(t, kinds["ConfigMap"], "data", "heatscope.yaml").(string)), 0o644); err != nil {
		t.Fatal(err)
	}
	checkConfigAccepted(t, config)
	checkConfigAccepted(t, filepath.Join(deployDir, "heatscope.yaml"))
}

// checkConfigAccepted runs record and serve on config with a flag that
// fails validation afterwards, so that nothing is started: the error must
// be that flag's, not the file's.
func checkConfigAccepted(t *testing.T, config string) {
	t.Helper()
	for _, args := range [][]string{{"record", "--config", config, "--frequency", "0"}, {"serve", "--config", config, "--listen", ""}} {
		var stderr bytes.Buffer
		code := run(args, io.Discard, &stderr)
		if code != 2 || strings.Contains(stderr.String(), "--config") || !strings.Contains(stderr.String(), args[len(args)-2]) {
			t.Errorf("%v: exit %d: %s; want only the %s error", args, code, stderr.String(), args[len(args)-2])
		}
	}
}

// unitSettings reads a systemd unit's Key=Value lines.
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not Key=Value: %q", path, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// TestDeploySystemd checks the unit's capabilities against the documented
// set and its hardening, and has systemd-analyze verify it.
func TestDeploySystemd(t *testing.T) {
	unit := filepath.Join(deployDir, "systemd", "heatscope.service")
	s := unitSettings(t, unit)
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		if got := strings.Fields(strings.Join(s[k], " ")); !slices.Equal(got, recorderCapabilities) {
			t.Errorf("%s = %v, want exactly %v", k, got, recorderCapabilities)
		}
	}
	for k, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "read-only",
		"ReadWritePaths": "/var/lib/heatscope", "Restart": "on-failure", "User": "heatscope", "PrivateTmp": "no",
		"ProtectKernelLogs": "no"} {
		if got := strings.Join(s[k], " "); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(strings.Join(s["ExecStart"], ""), "--data /var/lib/heatscope") {
		t.Errorf("ExecStart %q does not record into the ReadWritePaths directory", s["ExecStart"])
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze not installed: the unit is checked by the assertions above only")
		return
	}
	// verify wants the binary to exist: point ExecStart at a built one.
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "heatscope.service")
	if err := os.WriteFile(copyPath, bytes.ReplaceAll(b, []byte("/usr/local/bin/heatscope"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestDocumentedCapabilities checks README.md names each capability the
// recorder is given.
func TestDocumentedCapabilities(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range recorderCapabilities {
		if !bytes.Contains(b, []byte("`"+c+"`")) {
			t.Errorf("README.md does not document %s", c)
		}
	}
}

// TestDeployKubernetesCompactor checks the compactor's Deployment: one
// replica, never two at once, the recorders' objstore Secret, no
// privilege, and flags compact takes.
func TestDeployKubernetesCompactor(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(deployDir, "kubernetes", "compactor.yaml"))
	if len(docs) != 1 || docs[0]["kind"] != "Deployment" || dig(t, docs[0], "metadata", "namespace") != "heatscope" {
		t.Fatalf("compactor.yaml: want one Deployment in namespace heatscope, got %d documents", len(docs))
	}
	d := docs[0]
	if dig(t, d, "spec", "replicas") != 1 || dig(t, d, "spec", "strategy", "type") != "Recreate" {
		t.Error("the compactor must be a single replica with the Recreate strategy (one compactor per bucket)")
	}
	pod := dig(t, d, "spec", "template", "spec")
	c := dig(t, pod, "containers", 0)
	sc := dig(t, c, "securityContext")
	if dig(t, sc, "privileged") != false || dig(t, sc, "allowPrivilegeEscalation") != false || dig(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Error("the compactor needs no privilege: not privileged, no escalation, non-root")
	}
	if drop := strs(dig(t, sc, "capabilities", "drop")); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("the compactor drops %v, want ALL", drop)
	}
	if dig(t, pod, "volumes", 0, "secret", "secretName") != "heatscope-objstore" {
		t.Error("the compactor does not read the recorders' objstore Secret")
	}
	args := strs(dig(t, c, "args"))
	if len(args) == 0 || args[0] != "compact" || !slices.Contains(args, "--objstore-config=/etc/heatscope/objstore/objstore.yaml") {
		t.Fatalf("compactor args %v", args)
	}
	// Every flag is one compact takes: with a bad --ranges after them, the
	// only error is that one.
	var stderr bytes.Buffer
	if code := run(append(args, "--ranges", "bad"), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--ranges") {
		t.Errorf("%v: exit %d: %s; want only the --ranges error", args, code, stderr.String())
	}
}

// TestDeployKubernetesQuery checks the query service's Deployment and
// Service: two replicas (it keeps nothing of its own), the Service in
// front of their named port, the recorders' objstore Secret and token, a
// bounded disk cache on an emptyDir, no privilege, and flags serve takes.
func TestDeployKubernetesQuery(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(deployDir, "kubernetes", "query.yaml"))
	if len(docs) != 2 || docs[0]["kind"] != "Deployment" || docs[1]["kind"] != "Service" {
		t.Fatalf("query.yaml: want a Deployment and a Service, got %d documents", len(docs))
	}
	d, svc := docs[0], docs[1]
	for _, doc := range docs {
		if dig(t, doc, "metadata", "namespace") != "heatscope" {
			t.Errorf("%s not in namespace heatscope", doc["kind"])
		}
	}
	if dig(t, d, "spec", "replicas") != 2 {
		t.Error("the query service runs as 2 replicas")
	}
	pod := dig(t, d, "spec", "template", "spec")
	c := dig(t, pod, "containers", 0)
	podLabels := dig(t, d, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range dig(t, svc, "spec", "selector").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("the Service selects %s=%v, which the pods do not carry", k, v)
		}
	}
	if target := dig(t, svc, "spec", "ports", 0, "targetPort"); target != dig(t, c, "ports", 0, "name") || dig(t, c, "ports", 0, "containerPort") != 7070 {
		t.Errorf("the Service targets port %v, not the container's 7070", target)
	}
	sc := dig(t, c, "securityContext")
	if dig(t, sc, "privileged") != false || dig(t, sc, "allowPrivilegeEscalation") != false || dig(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Error("the query service needs no privilege: not privileged, no escalation, non-root")
	}
	if drop := strs(dig(t, sc, "capabilities", "drop")); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("the query service drops %v, want ALL", drop)
	}
	if dig(t, pod, "volumes", 0, "secret", "secretName") != "heatscope-objstore" || dig(t, pod, "volumes", 1, "emptyDir", "sizeLimit") != "2Gi" {
		t.Error("the query service reads the recorders' objstore Secret and caches on a bounded emptyDir")
	}
	if dig(t, c, "env", 0, "name") != "HEATSCOPE_AUTH_TOKEN" || dig(t, c, "env", 0, "valueFrom", "secretKeyRef", "name") != "heatscope-token" {
		t.Error("the query service keeps the recorders' bearer token")
	}
	args := strs(dig(t, c, "args"))
	if len(args) == 0 || args[0] != "serve" || !slices.Contains(args, "--objstore-config=/etc/heatscope/objstore/objstore.yaml") ||
		!slices.Contains(args, "--objstore-cache-dir=/cache") {
		t.Fatalf("query service args %v", args)
	}
	// Every flag is one serve takes: with a bad --memory-limit after them,
	// the only error is that one.
	var stderr bytes.Buffer
	if code := run(append(args, "--memory-limit", "bad"), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--memory-limit") {
		t.Errorf("%v: exit %d: %s; want only the --memory-limit error", args, code, stderr.String())
	}
}

// TestDeployKubernetesImage checks that every manifest runs the image
// `make image` builds (Makefile's IMAGE), and that kustomization.yaml
// applies them all and is the one place that names the registry.
func TestDeployKubernetesImage(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var image string
	for _, line := range strings.Split(string(makefile), "\n") {
		if v, ok := strings.CutPrefix(line, "IMAGE ?= "); ok {
			image = strings.TrimSpace(v)
		}
	}
	if image == "" {
		t.Fatal("the Makefile sets no IMAGE ?= default")
	}
	kustomization := yamlDocs(t, filepath.Join(deployDir, "kubernetes", "kustomization.yaml"))[0]
	resources := strs(kustomization["resources"])
	if dig(t, kustomization, "images", 0, "name") != image {
		t.Errorf("kustomization.yaml's images entry names %v, not the image make image builds (%s)", dig(t, kustomization, "images", 0, "name"), image)
	}
	manifests, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range manifests {
		name := filepath.Base(path)
		if name == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(resources, name) {
			t.Errorf("kustomization.yaml leaves out %s", name)
		}
		for _, doc := range yamlDocs(t, path) {
			if doc["kind"] != "Deployment" && doc["kind"] != "DaemonSet" {
				continue
			}
			for _, c := range dig(t, doc, "spec", "template", "spec", "containers").([]any) {
				if got := c.(map[string]any)["image"]; got != image+":latest" {
					t.Errorf("%s: %s runs image %v, want %s:latest (kustomization.yaml renames it)", name, doc["kind"], got, image)
				}
				if cmd := c.(map[string]any)["command"]; cmd != nil {
					t.Errorf("%s: %s overrides the image's entrypoint with %v; give args only", name, doc["kind"], cmd)
				}
			}
		}
	}
}
