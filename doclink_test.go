package idem_test

import (
	"errors"
	"go/ast"
	"go/build"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// modulePath is the import path of this module's root directory.
const modulePath = "github.com/idemkit/idem"

// TestDocLinks fails on a doc link ([Name], [Recv.Name], [pkg.Name]) in this
// module's documentation that names nothing: go doc and pkgsite print such a
// link as plain text in brackets, and a renamed identifier leaves it behind
// without a compile error. It reads every package of the module (not nested
// modules) and checks links into this module and the standard library; a
// link into another module is checked only as far as its package being
// imported.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	pkgs := newDocPackages()
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if dir != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && dir != "." {
			return filepath.SkipDir // a module of its own
		}
		p, err := pkgs.load(path.Join(modulePath, filepath.ToSlash(dir)))
		if err != nil || p == nil {
			return err
		}
		for _, c := range p.comments() {
			for _, l := range p.links(c.text) {
				if why := pkgs.resolve(p, l); why != "" {
					t.Errorf("%s: doc of %s: [%s]: %s", dir, c.of, l.text, why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docPackage is one package's documentation as go/doc reads it.
type docPackage struct {
	importPath string
	doc        *doc.Package
}

// docComment is one doc comment and what it documents.
type docComment struct {
	of   string
	text string
}

// docLink is a link written in a doc comment, before resolution: pkg is
// the import path, or shortName and the package's name as written ("" for
// this package); recv and name are the symbol.
type docLink struct {
	text            string
	pkg, recv, name string
}

// shortName marks a docLink's pkg written as a package name, such as
// "http", not as an import path.
const shortName = "\x00"

// docPackages loads packages by import path, once each.
type docPackages struct {
	loaded map[string]*docPackage
}

func newDocPackages() *docPackages {
	return &docPackages{loaded: map[string]*docPackage{}}
}

// load returns the documentation of the package at importPath, or nil
// when the path holds no Go package that this module or the standard
// library can read.
func (ps *docPackages) load(importPath string) (*docPackage, error) {
	if p, ok := ps.loaded[importPath]; ok {
		return p, nil
	}
	var dir string
	switch {
	case importPath == modulePath:
		dir = "."
	case strings.HasPrefix(importPath, modulePath+"/"):
		dir = filepath.FromSlash(strings.TrimPrefix(importPath, modulePath+"/"))
	case build.IsLocalImport(importPath) || strings.Contains(strings.SplitN(importPath, "/", 2)[0], "."):
		ps.loaded[importPath] = nil // another module's package
		return nil, nil
	default:
		dir = filepath.Join(build.Default.GOROOT, "src", filepath.FromSlash(importPath))
	}
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		ps.loaded[importPath] = nil
		if _, ok := err.(*build.NoGoError); ok {
			return nil, nil
		}
		if _, statErr := os.Stat(dir); os.IsNotExist(statErr) {
			return nil, nil
		}
		return nil, err
	}
	// Only this module's comments are read; a large package of the
	// standard library (net/http) parses in a fraction of the time
	// without its comments, and in parallel.
	mode := parser.SkipObjectResolution
	if !filepath.IsAbs(dir) {
		mode |= parser.ParseComments
	}
	fset := token.NewFileSet()
	names := append(bp.GoFiles, bp.CgoFiles...)
	files := make([]*ast.File, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			files[i], errs[i] = parser.ParseFile(fset, filepath.Join(dir, name), nil, mode)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d, err := doc.NewFromFiles(fset, files, importPath)
	if err != nil {
		return nil, err
	}
	p := &docPackage{importPath: importPath, doc: d}
	ps.loaded[importPath] = p
	return p, nil
}

// comments returns every doc comment of p that go doc, pkgsite or an
// editor shows: the package's, each exported declaration's, and each
// exported type's fields and interface methods.
func (p *docPackage) comments() []docComment {
	d := p.doc
	cs := []docComment{{"package " + d.Name, d.Doc}}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			cs = append(cs, docComment{strings.Join(v.Names, ", "), v.Doc})
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			of := f.Name
			if f.Recv != "" {
				of = strings.TrimPrefix(f.Recv, "*") + "." + f.Name
			}
			cs = append(cs, docComment{of, f.Doc})
		}
	}
	values(d.Consts)
	values(d.Vars)
	funcs(d.Funcs)
	for _, t := range d.Types {
		cs = append(cs, docComment{t.Name, t.Doc})
		values(t.Consts)
		values(t.Vars)
		funcs(t.Funcs)
		funcs(t.Methods)
		if fields := members(t); fields != nil {
			for _, f := range fields.List {
				if f.Doc == nil {
					continue
				}
				of := t.Name
				if len(f.Names) > 0 {
					of += "." + f.Names[0].Name
				}
				cs = append(cs, docComment{of, f.Doc.Text()})
			}
		}
	}
	return cs
}

// links returns every doc link written in text, whether or not it
// resolves: a parser that accepts every name finds them all.
func (p *docPackage) links(text string) []docLink {
	var links []docLink
	parser := comment.Parser{
		LookupPackage: func(name string) (string, bool) { return shortName + name, token.IsIdentifier(name) },
		LookupSym:     func(string, string) bool { return true },
	}
	var walk func(comment.Text)
	walk = func(t comment.Text) {
		switch t := t.(type) {
		case *comment.DocLink:
			l := docLink{pkg: t.ImportPath, recv: t.Recv, name: t.Name}
			var written []string
			if l.pkg != "" {
				written = append(written, strings.TrimPrefix(l.pkg, shortName))
			}
			for _, s := range []string{l.recv, l.name} {
				if s != "" {
					written = append(written, s)
				}
			}
			l.text = strings.Join(written, ".")
			links = append(links, l)
		case *comment.Link:
			for _, s := range t.Text {
				walk(s)
			}
		case *comment.Italic, comment.Plain:
		}
	}
	var blocks func([]comment.Block)
	blocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				for _, t := range b.Text {
					walk(t)
				}
			case *comment.Heading:
				for _, t := range b.Text {
					walk(t)
				}
			case *comment.List:
				for _, item := range b.Items {
					blocks(item.Content)
				}
			}
		}
	}
	blocks(parser.Parse(text).Content)
	return links
}

// resolve returns "" when link, written in a doc comment of p, names a
// package or a symbol in one, and otherwise why it does not.
func (ps *docPackages) resolve(p *docPackage, l docLink) string {
	target := p
	if l.pkg != "" {
		importPath, short := strings.CutPrefix(l.pkg, shortName)
		if short {
			name := importPath
			var ok bool
			if importPath, ok = p.doc.Parser().LookupPackage(name); !ok {
				if importPath, ok = comment.DefaultLookupPackage(name); !ok {
					return "package " + name + " is not imported here: write its import path"
				}
			}
			if importPath == "" {
				importPath = p.importPath // the package's own name
			}
		}
		var err error
		if target, err = ps.load(importPath); err != nil {
			return err.Error()
		}
		if target == nil {
			if strings.HasPrefix(importPath, modulePath+"/") {
				return "no package " + importPath
			}
			return "" // another module's package
		}
		if l.name == "" {
			return "" // a link to the package itself
		}
	}
	if !target.doc.Parser().LookupSym(l.recv, l.name) && !target.hasMember(l.recv, l.name) {
		return "no such name in " + target.importPath
	}
	return ""
}

// hasMember reports whether the package has a type recv with a field or
// an interface method called name: go/doc resolves such links only since
// Go 1.26, and this module's tests run on Go 1.25 too.
func (p *docPackage) hasMember(recv, name string) bool {
	if recv == "" {
		return false
	}
	for _, t := range p.doc.Types {
		if fields := members(t); t.Name == recv && fields != nil {
			for _, f := range fields.List {
				for _, n := range f.Names {
					if n.Name == name {
						return true
					}
				}
			}
		}
	}
	return false
}

// members returns the fields of t, a struct type, or the methods of t, an
// interface type, and nil for any other type.
func members(t *doc.Type) *ast.FieldList {
	for _, spec := range t.Decl.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != t.Name {
			continue
		}
		switch tt := ts.Type.(type) {
		case *ast.StructType:
			return tt.Fields
		case *ast.InterfaceType:
			return tt.Methods
		}
	}
	return nil
}
