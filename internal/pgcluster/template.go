package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// templatePrefix starts the name of the initdb template directories under
// os.TempDir(). It deliberately does not start with DirPrefix: ReapStale
// must not take templates for stale clusters.
const templatePrefix = "repstream-pgtemplate-"

// initData fills c.dataDir with a fresh initdb'd data directory.
//
// initdb takes most of a cluster's start time, and its output depends only on
// the binaries, the options (fixed here) and the owner, so the first Start on
// the machine runs initdb into a template directory, <tmp>/repstream-pgtemplate-<key>,
// and every Start copies it. The template appears atomically (initdb into a
// build directory, then rename) and is never modified afterwards, so
// concurrent processes can share it. Any failure falls back to initdb.
func (c *Cluster) initData(ctx context.Context) error {
	tmpl, err := c.template(ctx)
	if err == nil {
		if err = c.copyTree(tmpl, c.dataDir); err == nil {
			return nil
		}
		if rmErr := os.RemoveAll(c.dataDir); rmErr != nil {
			return fmt.Errorf("clean up after failed template copy: %w", rmErr)
		}
	}
	c.log.Debug("initdb template unusable, running initdb", "err", err)
	return c.initdb(ctx, c.dataDir)
}

// initdb runs initdb for dataDir with the options every cluster uses.
func (c *Cluster) initdb(ctx context.Context, dataDir string) error {
	if _, err := c.run(ctx, "initdb", "-D", dataDir, "-U", Superuser, "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return fmt.Errorf("initdb cluster %s in %s: %w", c.name, dataDir, err)
	}
	return nil
}

// template returns the data directory of the template for c's binaries and
// owner, creating it if needed.
func (c *Cluster) template(ctx context.Context) (string, error) {
	if os.Getenv(EnvNoTemplate) == "1" {
		return "", errTemplateDisabled
	}
	fi, err := os.Stat(filepath.Join(c.binDir, "postgres"))
	if err != nil {
		return "", fmt.Errorf("stat postgres binary: %w", err)
	}
	h := fnv.New64a()
	uid := os.Geteuid()
	if c.cred != nil {
		uid = int(c.cred.Uid)
	}
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d", c.binDir, fi.Size(), fi.ModTime().UnixNano(), uid)
	final := filepath.Join(os.TempDir(), templatePrefix+strconv.FormatUint(h.Sum64(), 16))
	data := filepath.Join(final, "data")
	if tfi, err := os.Stat(final); err == nil {
		if time.Since(tfi.ModTime()) < templateMaxAge && fileExists(filepath.Join(data, "PG_VERSION")) {
			return data, nil
		}
		// Too old (or damaged): retire it atomically, then rebuild. A process
		// copying it right now fails its copy and falls back to initdb.
		trash := final + "-old-" + strconv.Itoa(os.Getpid())
		if err := os.Rename(final, trash); err == nil {
			_ = os.RemoveAll(trash)
		}
	}

	build, err := os.MkdirTemp(os.TempDir(), templatePrefix+"build-*")
	if err != nil {
		return "", fmt.Errorf("create template build dir: %w", err)
	}
	defer os.RemoveAll(build) // no-op after a successful rename
	if err := os.Chmod(build, 0o755); err != nil {
		return "", fmt.Errorf("chmod %s: %w", build, err)
	}
	if err := c.chown(build); err != nil {
		return "", err
	}
	if err := c.initdb(ctx, filepath.Join(build, "data")); err != nil {
		return "", err
	}
	if err := os.Rename(build, final); err != nil {
		// Another process won the race: use its template.
		if _, statErr := os.Stat(filepath.Join(data, "PG_VERSION")); statErr == nil {
			return data, nil
		}
		return "", fmt.Errorf("publish initdb template %s: %w", final, err)
	}
	c.log.Debug("initdb template created", "dir", final)
	return data, nil
}

// copyTree copies the directory src to dst (which must not exist), keeping
// permission bits and giving everything to the server's OS user.
func (c *Cluster) copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return fmt.Errorf("copy template: %w", err)
			}
			// Mkdir is subject to the umask; PostgreSQL checks PGDATA's mode.
			if err := os.Chmod(target, info.Mode().Perm()); err != nil {
				return fmt.Errorf("copy template: %w", err)
			}
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return fmt.Errorf("copy template: %w", err)
			}
			if err := os.Symlink(link, target); err != nil {
				return fmt.Errorf("copy template: %w", err)
			}
			return c.lchown(target)
		case info.Mode().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("copy template: unexpected file type %v at %s", info.Mode().Type(), path)
		}
		return c.chown(target)
	})
}

func (c *Cluster) lchown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("lchown %s: %w", path, err)
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy template: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("copy template: %w", err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("copy template: close %s: %w", dst, cerr)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy template %s: %w", src, err)
	}
	return nil
}

// EnvNoTemplate names the environment variable that, set to "1", makes every
// Start run initdb itself instead of copying the shared template.
const EnvNoTemplate = "REPSTREAM_PG_NO_TEMPLATE"

// templateMaxAge bounds a template's age: /tmp cleaners (systemd-tmpfiles)
// delete old files one by one, which could leave a template half-empty.
const templateMaxAge = 24 * time.Hour

// errTemplateDisabled is returned by template when EnvNoTemplate is set.
var errTemplateDisabled = errors.New("initdb template disabled by " + EnvNoTemplate)
