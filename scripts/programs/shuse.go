package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Bash builtins and keywords that can stand where a command does.
var builtins = words(`: . [ alias bg bind break builtin caller cd command compgen complete compopt
	continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history
	jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift
	shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`)

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// shellScan holds what all scanned scripts define, so that a function of a
// sourced file is not taken for a program.
type shellScan struct {
	funcs map[string]bool
	// wraps: functions that run their arguments as a command ("$@"),
	// from this argument on (1 + the shifts before).
	wraps map[string]int
	uses  []Use
	probs []Problem
}

type shellSource struct {
	name string // as reported (relative path, or path:line for a Makefile recipe)
	line int    // line offset of the text in its file
	text string
}

// ScanShell finds the programs the given shell scripts and the Makefile's
// recipes (and $(shell ...) calls) run.
func ScanShell(root string, scripts []string, makefile string) ([]Use, []Problem, error) {
	var srcs []shellSource
	for _, s := range scripts {
		b, err := os.ReadFile(filepath.Join(root, s))
		if err != nil {
			return nil, nil, err
		}
		srcs = append(srcs, shellSource{name: s, text: string(b)})
	}
	if makefile != "" {
		b, err := os.ReadFile(filepath.Join(root, makefile))
		if err != nil {
			return nil, nil, err
		}
		srcs = append(srcs, makeRecipes(makefile, string(b))...)
	}
	sc := &shellScan{funcs: map[string]bool{}, wraps: map[string]int{}}
	files := make([]*syntax.File, len(srcs))
	for i, s := range srcs {
		f, err := syntax.NewParser(syntax.KeepComments(true)).Parse(strings.NewReader(s.text), s.name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		files[i] = f
		syntax.Walk(f, func(n syntax.Node) bool {
			if fd, ok := n.(*syntax.FuncDecl); ok {
				sc.funcs[fd.Name.Value] = true
			}
			return true
		})
	}
	for _, f := range files {
		syntax.Walk(f, func(n syntax.Node) bool {
			if fd, ok := n.(*syntax.FuncDecl); ok {
				if from, ok := sc.wrapsArgs(fd); ok {
					sc.wraps[fd.Name.Value] = from
				}
			}
			return true
		})
	}
	for i, f := range files {
		sc.walk(srcs[i], f)
	}
	return sc.uses, sc.probs, nil
}

// wrapsArgs reports whether a function runs its arguments ("$@") as a
// command, and from which argument (1 plus the shifts in its body).
func (sc *shellScan) wrapsArgs(fd *syntax.FuncDecl) (int, bool) {
	shifts, runs := 0, false
	syntax.Walk(fd.Body, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if lit(call.Args[0]) == "shift" {
			shifts++
			if len(call.Args) > 1 {
				if k, err := strconv.Atoi(lit(call.Args[1])); err == nil {
					shifts += k - 1
				}
			}
		}
		if left := sc.peel(shellSource{}, call.Args, false); len(left) > 0 && allArgs(left[0]) {
			runs = true
		}
		return true
	})
	return 1 + shifts, runs
}

// allArgs reports whether the word is "$@".
func allArgs(w *syntax.Word) bool {
	parts := w.Parts
	if len(parts) == 1 {
		if dq, ok := parts[0].(*syntax.DblQuoted); ok {
			parts = dq.Parts
		}
	}
	if len(parts) != 1 {
		return false
	}
	pe, ok := parts[0].(*syntax.ParamExp)
	return ok && pe.Param != nil && pe.Param.Value == "@"
}

// interpreter returns the program a script's "#!" line runs it with.
func interpreter(text string) string {
	if !strings.HasPrefix(text, "#!") {
		return ""
	}
	f := strings.Fields(strings.SplitN(text[2:], "\n", 2)[0])
	if len(f) == 0 {
		return ""
	}
	if path.Base(f[0]) == "env" && len(f) > 1 {
		return f[1]
	}
	return path.Base(f[0])
}

func (sc *shellScan) walk(src shellSource, f *syntax.File) {
	if prog := interpreter(src.text); prog != "" && src.line == 0 {
		sc.uses = append(sc.uses, Use{Program: prog, Where: src.name + ":1", Part: partScripts})
		if prog == "busybox" {
			// A busybox script (the kernel-test guest's init) runs
			// busybox's own applets, not the host's programs.
			return
		}
	}
	for _, c := range f.Last {
		sc.noteComment(src, c)
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			for _, c := range n.Comments {
				sc.noteComment(src, c)
			}
		case *syntax.CallExpr:
			sc.peel(src, n.Args, true)
		}
		return true
	})
}

// noteComment takes "# runs: NAME..." comments, for programs a script runs
// through a variable or a tool of its own.
func (sc *shellScan) noteComment(src shellSource, c syntax.Comment) {
	text := strings.TrimSpace(c.Text)
	if !strings.HasPrefix(text, annotation) {
		return
	}
	for _, name := range annotatedNames(text[len(annotation):]) {
		sc.use(src, name, c.Pos())
	}
}

func (sc *shellScan) use(src shellSource, name string, pos syntax.Pos) {
	sc.uses = append(sc.uses, Use{Program: name, Where: fmt.Sprintf("%s:%d", src.name, src.line+int(pos.Line())), Part: partScripts})
}

// literal returns a word's value when it holds no expansion.
func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// peel records (when record is set) the programs a simple command runs,
// looking through the wrappers that run another command (timeout 5 rbd ...,
// env -i A=b cmd, the script's own functions that run "$@"). It returns the
// words from the first command word it cannot read (a variable, "$@"), if
// any.
func (sc *shellScan) peel(src shellSource, args []*syntax.Word, record bool) []*syntax.Word {
	noFuncs := false // after "command": the name is never a function
	for len(args) > 0 {
		name, ok := literal(args[0])
		if !ok || name == "" {
			return args
		}
		rest := args[1:]
		use := func(name string) {
			if record {
				sc.use(src, name, args[0].Pos())
			}
		}
		switch {
		case sc.funcs[name] && !noFuncs:
			from, wraps := sc.wraps[name]
			if !wraps || len(args) <= from {
				return nil
			}
			args = args[from:]
			continue
		case strings.HasSuffix(name, "/rootfs.sh") && len(rest) >= 2 && lit(rest[0]) == "run":
			args = rest[2:] // rootfs.sh run ROOT CMD...
			continue
		case name == "exec" || name == "builtin" || name == "time" || name == "nohup" || name == "setsid" ||
			strings.HasSuffix(name, "/with-cluster.sh"):
			if name != "exec" && name != "builtin" && !strings.Contains(name, "/") {
				use(name)
			}
			args = skipOptions(rest, nil)
			continue
		case name == "command":
			if len(rest) > 0 && (lit(rest[0]) == "-v" || lit(rest[0]) == "-V") {
				return nil // only looks the name up
			}
			args, noFuncs = skipOptions(rest, nil), true
			continue
		case name == "trap":
			if record && len(rest) > 0 && lit(rest[0]) != "-" {
				sc.nested(src, rest[0])
			}
			return nil
		case builtins[name]:
			if name == "eval" && record {
				for _, w := range rest {
					sc.nested(src, w)
				}
			}
			return nil
		case strings.Contains(name, "/"):
			if !systemPath.MatchString(name) {
				return nil // a project script or a built binary, run by path
			}
			name = path.Base(name)
		}
		use(name)
		switch name {
		case "timeout":
			args = skipOptions(rest, map[string]bool{"-s": true, "--signal": true, "-k": true, "--kill-after": true})
			if len(args) > 0 {
				args = args[1:] // the duration
			}
		case "env":
			args = skipOptions(rest, map[string]bool{"-u": true, "--unset": true, "-C": true, "--chdir": true})
			for len(args) > 0 {
				if v, ok := literal(args[0]); !ok || !strings.Contains(v, "=") {
					break
				}
				args = args[1:]
			}
		case "chroot", "flock":
			args = skipOptions(rest, nil)
			if len(args) > 0 {
				args = args[1:] // the new root, the lock file
			}
		case "nice", "ionice", "stdbuf", "xargs", "sudo":
			args = skipOptions(rest, valued[name])
		case "unshare", "setpriv":
			args = afterDoubleDash(rest)
		case "ip":
			if len(rest) >= 3 && lit(rest[0]) == "netns" && lit(rest[1]) == "exec" {
				args = rest[3:]
			} else {
				return nil
			}
		case "bash", "sh":
			for i, w := range rest {
				if record && lit(w) == "-c" && i+1 < len(rest) {
					sc.nested(src, rest[i+1])
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// systemPath matches programs run by an absolute path of the system's.
var systemPath = regexp.MustCompile(`^/(usr/)?s?bin/`)

// valued are the options of wrappers that take a separate value.
var valued = map[string]map[string]bool{
	"nice":   words("-n --adjustment"),
	"ionice": words("-c --class -n --classdata -p --pid"),
	"stdbuf": words("-i -o -e"),
	"xargs":  words("-a -d -E -I -L -n -P -s --arg-file --delimiter --max-args --max-procs"),
	"sudo":   words("-u -g -C -D -h -p -U --user --group"),
}

func lit(w *syntax.Word) string {
	s, _ := literal(w)
	return s
}

// skipOptions drops leading -options (and the values of those in withValue).
func skipOptions(args []*syntax.Word, withValue map[string]bool) []*syntax.Word {
	for len(args) > 0 {
		v, ok := literal(args[0])
		if !ok || !strings.HasPrefix(v, "-") || v == "-" {
			return args
		}
		args = args[1:]
		if v == "--" {
			return args
		}
		if withValue[v] && len(args) > 0 {
			args = args[1:]
		}
	}
	return args
}

// afterDoubleDash returns what follows "--", or nothing: the command of a
// wrapper with many valued options is only read after an explicit "--".
func afterDoubleDash(args []*syntax.Word) []*syntax.Word {
	for i, w := range args {
		if lit(w) == "--" {
			return args[i+1:]
		}
	}
	return nil
}

// nested scans shell code held in a word (bash -c '...', trap '...').
func (sc *shellScan) nested(src shellSource, w *syntax.Word) {
	code, ok := literal(w)
	if !ok {
		return
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(code), src.name)
	if err != nil {
		sc.probs = append(sc.probs, Problem{Where: fmt.Sprintf("%s:%d", src.name, src.line+int(w.Pos().Line())), Msg: "cannot parse nested shell code: " + err.Error()})
		return
	}
	inner := src
	inner.line += int(w.Pos().Line()) - 1
	sc.walk(inner, f)
}

var makeRef = regexp.MustCompile(`\$[({]([A-Za-z0-9_.@<^*%-]+)[)}]|\$[@<^*%]`)

// makeRecipes turns a Makefile's recipe lines (and its $(shell ...) calls)
// into shell sources: make's own $(VAR) references become shell variables
// (a value the scan cannot read, like any variable) and "$$" becomes "$".
func makeRecipes(name, text string) []shellSource {
	var out []shellSource
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		start := i
		line := lines[i]
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimLeft(lines[i], "\t ")
		}
		var code []string
		if strings.HasPrefix(line, "\t") {
			code = append(code, strings.TrimLeft(strings.TrimPrefix(line, "\t"), "@-+"))
		}
		for _, m := range regexp.MustCompile(`\$\(shell ([^)]*)\)`).FindAllStringSubmatch(line, -1) {
			code = append(code, m[1])
		}
		for _, c := range code {
			c = strings.ReplaceAll(c, "$$", "\x00")
			c = makeRef.ReplaceAllString(c, "$${MAKEVAR}") // a value make fills in
			c = strings.ReplaceAll(c, "\x00", "$")
			out = append(out, shellSource{name: name, line: start, text: c})
		}
	}
	return out
}
