package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Use is one place that runs a program.
type Use struct {
	Program string
	Where   string // file:line
	Part    string // plugin, tests or scripts
}

// Problem is a place the scan could not read.
type Problem struct {
	Where, Msg string
}

// Parts of the project a use can be in.
const (
	partPlugin  = "plugin"
	partTests   = "tests"
	partScripts = "scripts"
)

// annotation marks a comment that names the programs a place runs, where
// the name is not a constant the scan can follow (a built binary's path, a
// library that runs tools itself): "// runs: mount umount".
const annotation = "runs:"

// goPackage is one directory's Go files, parsed.
type goPackage struct {
	fset   *token.FileSet
	files  []*ast.File
	paths  []string
	consts map[string]string
	funcs  map[string][]*ast.FuncDecl
	notes  map[*ast.File]map[int][]string
}

// ScanGo finds every program the Go code under dirs runs through os/exec
// or a Runner (a value named run/runner with a Run(ctx, name, args...)
// method), plus the "runs:" annotations.
func ScanGo(root string, dirs []string) ([]Use, []Problem, error) {
	byDir := map[string][]string{}
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, de os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() && de.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !de.IsDir() && strings.HasSuffix(p, ".go") {
				byDir[filepath.Dir(p)] = append(byDir[filepath.Dir(p)], p)
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	var uses []Use
	var problems []Problem
	dirNames := make([]string, 0, len(byDir))
	for d := range byDir {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)
	for _, d := range dirNames {
		pkg, err := parseGoPackage(byDir[d])
		if err != nil {
			return nil, nil, err
		}
		u, p := pkg.scan(root)
		uses = append(uses, u...)
		problems = append(problems, p...)
	}
	return uses, problems, nil
}

func parseGoPackage(paths []string) (*goPackage, error) {
	sort.Strings(paths)
	pkg := &goPackage{fset: token.NewFileSet(), paths: paths, consts: map[string]string{},
		funcs: map[string][]*ast.FuncDecl{}, notes: map[*ast.File]map[int][]string{}}
	for _, p := range paths {
		f, err := parser.ParseFile(pkg.fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pkg.files = append(pkg.files, f)
		pkg.notes[f] = annotated(pkg.fset, f)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				pkg.funcs[n.Name.Name] = append(pkg.funcs[n.Name.Name], n)
			case *ast.GenDecl:
				if n.Tok == token.CONST {
					for _, s := range n.Specs {
						vs := s.(*ast.ValueSpec)
						for i, name := range vs.Names {
							if i < len(vs.Values) {
								if v, ok := stringLit(vs.Values[i]); ok {
									pkg.consts[name.Name] = v
								}
							}
						}
					}
				}
			}
			return true
		})
	}
	return pkg, nil
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// partOf tells where the file rel belongs. A package named <x>test (as
// rbdtest, kmiptest) is a test helper: only tests import it.
func partOf(rel string) string {
	switch {
	case strings.HasPrefix(rel, "scripts/"):
		return partScripts
	case strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "e2e/"),
		strings.HasSuffix(path.Dir(rel), "test"):
		return partTests
	}
	return partPlugin
}

// annotated returns, per line, the programs a "runs:" comment names. A
// name with a slash is a path to a binary the project builds itself
// (bin/rbdplugin): it marks the place as read, but names no program to list.
func annotated(fset *token.FileSet, f *ast.File) map[int][]string {
	m := map[int][]string{}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			text := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
			if i := strings.Index(text, annotation); i == 0 {
				m[fset.Position(c.Slash).Line] = annotatedNames(text[len(annotation):])
			}
		}
	}
	return m
}

// annotatedNames returns the program names of an annotation's text: the
// words before any "(" (which starts a remark), without paths.
func annotatedNames(text string) []string {
	names := []string{}
	for _, w := range strings.Fields(strings.SplitN(text, "(", 2)[0]) {
		if !strings.Contains(w, "/") {
			names = append(names, w)
		}
	}
	return names
}

// noted reports whether a "runs:" comment covers the line (on it or just above).
func (pkg *goPackage) noted(f *ast.File, line int) bool {
	_, on := pkg.notes[f][line]
	_, above := pkg.notes[f][line-1]
	return on || above
}

func (pkg *goPackage) scan(root string) ([]Use, []Problem) {
	var uses []Use
	var problems []Problem
	for i, f := range pkg.files {
		rel, _ := filepath.Rel(root, pkg.paths[i])
		part := partOf(rel)
		for line, names := range pkg.notes[f] {
			for _, n := range names {
				uses = append(uses, Use{Program: n, Where: rel + ":" + strconv.Itoa(line), Part: part})
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if isRunnerMethod(n) {
				return false // its callers' run.Run sites name the programs
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			arg, ok := execArg(call)
			if !ok {
				return true
			}
			line := pkg.fset.Position(call.Pos()).Line
			where := rel + ":" + strconv.Itoa(line)
			if pkg.noted(f, line) {
				return true
			}
			names, ok := pkg.resolve(f, arg, 0)
			if !ok {
				problems = append(problems, Problem{Where: where, Msg: "cannot tell which program this runs: use a constant name, or say it in a comment on the line or the one above (// runs: NAME...)"})
				return true
			}
			for _, name := range names {
				uses = append(uses, Use{Program: name, Where: where, Part: part})
			}
			return true
		})
	}
	return uses, problems
}

// execArg returns the argument of call that names the program, if call
// runs one: exec.Command(name, ...), exec.CommandContext(ctx, name, ...),
// and <...>.run.Run(ctx, name, ...) or <...>.run.RunInput(ctx, stdin, name,
// ...) on the project's Runner.
func execArg(call *ast.CallExpr) (ast.Expr, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, false
	}
	idx := -1
	switch sel.Sel.Name {
	case "Command":
		if isIdent(sel.X, "exec") {
			idx = 0
		}
	case "CommandContext":
		if isIdent(sel.X, "exec") {
			idx = 1
		}
	case "Run", "RunInput":
		if recv := lastName(sel.X); strings.EqualFold(recv, "run") || strings.EqualFold(recv, "runner") {
			idx = 1
			if sel.Sel.Name == "RunInput" {
				idx = 2
			}
		}
	}
	if idx < 0 || len(call.Args) <= idx {
		return nil, false
	}
	return call.Args[idx], true
}

// isRunnerMethod reports whether n is a Runner's own Run or RunInput
// method, which runs whatever program its caller names: the programs are
// found at the callers' run.Run and run.RunInput sites instead.
func isRunnerMethod(n ast.Node) bool {
	fn, ok := n.(*ast.FuncDecl)
	return ok && fn.Recv != nil && (fn.Name.Name == "Run" || fn.Name.Name == "RunInput")
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func lastName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// resolve follows e to the string constants it can hold: literals,
// constants, local variables assigned only such values (or a package
// function's results), and parameters, through every call site in the
// package. Anything else is not resolvable.
func (pkg *goPackage) resolve(f *ast.File, e ast.Expr, depth int) ([]string, bool) {
	if depth > 6 {
		return nil, false
	}
	if s, ok := stringLit(e); ok {
		return []string{s}, true
	}
	id, ok := e.(*ast.Ident)
	if !ok {
		return nil, false
	}
	if id.Obj == nil {
		if v, ok := pkg.consts[id.Name]; ok {
			return []string{v}, true
		}
		return nil, false
	}
	switch decl := id.Obj.Decl.(type) {
	case *ast.ValueSpec:
		if id.Obj.Kind == ast.Con {
			if v, ok := pkg.consts[id.Name]; ok {
				return []string{v}, true
			}
		}
		for i, n := range decl.Names {
			if n.Name == id.Name && i < len(decl.Values) {
				return pkg.resolve(f, decl.Values[i], depth+1)
			}
		}
	case *ast.AssignStmt:
		return pkg.resolveAssigned(f, id, depth)
	case *ast.Field:
		return pkg.resolveParam(f, id, decl, depth)
	}
	return nil, false
}

// resolveAssigned collects every value assigned to the local variable id.
func (pkg *goPackage) resolveAssigned(f *ast.File, id *ast.Ident, depth int) ([]string, bool) {
	var out []string
	ok := true
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		as, isAssign := n.(*ast.AssignStmt)
		if !isAssign || !ok {
			return ok
		}
		for i, lhs := range as.Lhs {
			l, isIdent := lhs.(*ast.Ident)
			if !isIdent || l.Obj != id.Obj {
				continue
			}
			found = true
			var vals []string
			var good bool
			switch {
			case len(as.Rhs) == len(as.Lhs):
				vals, good = pkg.resolve(f, as.Rhs[i], depth+1)
			case len(as.Rhs) == 1:
				vals, good = pkg.resolveResult(as.Rhs[0], i, depth)
			}
			if !good {
				ok = false
				return false
			}
			out = append(out, vals...)
		}
		return true
	})
	return out, ok && found
}

// resolveResult resolves result i of a call to a function of the package.
func (pkg *goPackage) resolveResult(e ast.Expr, i, depth int) ([]string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return nil, false
	}
	fns := pkg.funcs[lastName(call.Fun)]
	if len(fns) == 0 {
		return nil, false
	}
	var out []string
	for _, fn := range fns {
		file := pkg.fileOf(fn)
		good := true
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if _, lit := n.(*ast.FuncLit); lit {
				return false
			}
			ret, isRet := n.(*ast.ReturnStmt)
			if !isRet || !good || i >= len(ret.Results) {
				return good
			}
			// A failing branch returns "" with its error: not a program.
			if s, isLit := stringLit(ret.Results[i]); isLit && s == "" {
				return true
			}
			vals, ok := pkg.resolve(file, ret.Results[i], depth+1)
			if !ok {
				good = false
				return false
			}
			out = append(out, vals...)
			return true
		})
		if !good {
			return nil, false
		}
	}
	return out, len(out) > 0
}

// resolveParam resolves a parameter through the call sites of its function:
// a declared function (by name, anywhere in the package) or a function
// literal bound to a local variable.
func (pkg *goPackage) resolveParam(f *ast.File, id *ast.Ident, field *ast.Field, depth int) ([]string, bool) {
	var ftype *ast.FuncType
	var declName string
	var litVar *ast.Object
	ast.Inspect(f, func(n ast.Node) bool {
		if ftype != nil {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncDecl:
			if hasField(n.Type, field) {
				ftype, declName = n.Type, n.Name.Name
			}
		case *ast.AssignStmt:
			for i, r := range n.Rhs {
				if lit, ok := r.(*ast.FuncLit); ok && hasField(lit.Type, field) && i < len(n.Lhs) {
					if l, ok := n.Lhs[i].(*ast.Ident); ok {
						ftype, litVar = lit.Type, l.Obj
					}
				}
			}
		}
		return true
	})
	if ftype == nil {
		return nil, false
	}
	idx := paramIndex(ftype, id.Name)
	var out []string
	ok, calls := true, 0
	for _, file := range pkg.files {
		ast.Inspect(file, func(n ast.Node) bool {
			call, isCall := n.(*ast.CallExpr)
			if !isCall || !ok {
				return ok
			}
			match := false
			if litVar != nil {
				c, isIdent := call.Fun.(*ast.Ident)
				match = isIdent && c.Obj == litVar
			} else {
				match = lastName(call.Fun) == declName
			}
			if !match || idx >= len(call.Args) {
				return true
			}
			calls++
			if pkg.noted(file, pkg.fset.Position(call.Pos()).Line) {
				return true // the annotation there names the programs
			}
			vals, good := pkg.resolve(file, call.Args[idx], depth+1)
			if !good {
				ok = false
				return false
			}
			out = append(out, vals...)
			return true
		})
	}
	return out, ok && calls > 0
}

func hasField(t *ast.FuncType, field *ast.Field) bool {
	if t.Params == nil {
		return false
	}
	for _, f := range t.Params.List {
		if f == field {
			return true
		}
	}
	return false
}

func paramIndex(t *ast.FuncType, name string) int {
	i := 0
	for _, f := range t.Params.List {
		for _, n := range f.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

func (pkg *goPackage) fileOf(n ast.Node) *ast.File {
	for _, f := range pkg.files {
		if f.Pos() <= n.Pos() && n.End() <= f.End() {
			return f
		}
	}
	return nil
}
