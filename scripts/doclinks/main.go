// Command doclinks checks that every relative link in the repository's
// Markdown files resolves: the file or directory it names exists in the
// repository, and its #anchor is a heading (by GitHub's rules: lower case,
// punctuation dropped, spaces to hyphens, repeats numbered -1, -2, ...) or
// an HTML id of the target. Links with a URL scheme are not followed.
//
//	go run ./scripts/doclinks [-root DIR]   (make lint)
//
// The files are those git tracks or would track (untracked files that no
// .gitignore excludes), so a new document is checked before its first
// commit and a link into an ignored directory (results/, bin/) fails.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository's top directory")
	flag.Parse()
	files, err := repoFiles(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	t := newTree(files, func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(*root, filepath.FromSlash(name)))
		return string(b), err
	})
	problems, err := check(t)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "doclinks: %d broken links\n", len(problems))
		os.Exit(1)
	}
}

// repoFiles lists the files git tracks or would track under root, by slash
// path. Files deleted from the work tree but still in the index are left
// out: a link to one is broken.
func repoFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
			continue
		}
		files = append(files, f)
	}
	return files, nil
}
