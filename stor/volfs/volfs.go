// Package volfs presents an open volume (package stor) as one file in a
// FUSE filesystem, so that any program can use it — through a loop device
// (losetup), as a block device with a real filesystem on it:
//
//	ndma vol mount data /mnt/ndma &        # /mnt/ndma/data, once ready (--ready-file)
//	losetup --find --show /mnt/ndma/data   # → /dev/loopN
//	mkfs.ext4 /dev/loopN && mount /dev/loopN /mnt/data
//
// Reads and writes of the file are the volume's; fsync(2) on it (which the
// loop driver sends for a filesystem's flushes and barriers) is the
// volume's Flush, so what ext4 considers durable is durable on every live
// replica. The file's size is the volume's and cannot change, and the file
// cannot be removed, renamed or joined by others: the mount is the one
// file, as a disk is one device.
//
// Mount cleans a dead mount a crashed server left at its directory first,
// and returns once the file is reachable. Unmount always ends the mount
// within its bound: a file still held open (a loop device still attached)
// is detached lazily instead of keeping the mount, and its caller with
// the volume's write lease, waiting.
package volfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ndma/ndma/stor"
)

// Options configure Mount.
type Options struct {
	// Name is the file's name in the mount (the volume's name when empty).
	Name string
	// ReadOnly presents the file without write permission.
	ReadOnly bool
	// AllowOther lets users other than the mounter reach the file.
	AllowOther bool
	// Debug logs every FUSE request (to Logger, at level WARN).
	Debug bool
	// Logger receives the mount's events: a dead mount cleaned at the
	// directory, a lazy unmount, and every failed read, write and fsync
	// of the volume at level WARN (at most one line per second of each
	// kind, with the count of those left out). Nil: none.
	Logger *slog.Logger
}

// root is the mount's directory: one file, which stays as it is. The
// kernel asks before it changes a directory, and the answer to removing,
// renaming or adding an entry is EPERM: without these methods go-fuse
// would report an unlink or a rename done (and forget the file until the
// next mount) although nothing happened to the volume.
type root struct {
	fs.Inode
	file *file
	name string
}

var (
	_ fs.NodeOnAdder   = (*root)(nil)
	_ fs.NodeUnlinker  = (*root)(nil)
	_ fs.NodeRmdirer   = (*root)(nil)
	_ fs.NodeRenamer   = (*root)(nil)
	_ fs.NodeMkdirer   = (*root)(nil)
	_ fs.NodeCreater   = (*root)(nil)
	_ fs.NodeSymlinker = (*root)(nil)
	_ fs.NodeLinker    = (*root)(nil)
	_ fs.NodeMknoder   = (*root)(nil)
	_ fs.NodeSetattrer = (*root)(nil)
	_ fs.NodeGetattrer = (*root)(nil)
)

func (r *root) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, r.file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	r.AddChild(r.name, ch, false)
}

func (r *root) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }
func (r *root) Rmdir(ctx context.Context, name string) syscall.Errno  { return syscall.EPERM }

func (r *root) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}

func (r *root) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (r *root) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EPERM
}

func (r *root) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (r *root) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (r *root) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (r *root) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	if t := r.file.created; t > 0 {
		out.Mtime, out.Ctime, out.Atime = uint64(t/1e9), uint64(t/1e9), uint64(t/1e9)
	}
	return 0
}

// Setattr refuses chmod, chown and utimes of the directory: its attributes
// are the mount's.
func (r *root) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EPERM
}

// file is the volume.
type file struct {
	fs.Inode
	v        volume
	readOnly bool
	created  int64 // Unix ns: the file's times
	// detached is set once Unmount has given up the mount: the volume may
	// be closed, and whoever still holds the file open gets EIO.
	detached atomic.Bool
	readErr  *errLog
	writeErr *errLog
	syncErr  *errLog
}

// volume is what file needs of a *stor.Volume.
type volume interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Flush() error
	Size() int64
}

var (
	_ fs.NodeOpener    = (*file)(nil)
	_ fs.NodeReader    = (*file)(nil)
	_ fs.NodeWriter    = (*file)(nil)
	_ fs.NodeGetattrer = (*file)(nil)
	_ fs.NodeSetattrer = (*file)(nil)
	_ fs.NodeFsyncer   = (*file)(nil)
	_ fs.NodeFlusher   = (*file)(nil)
)

func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if f.detached.Load() {
		return nil, 0, syscall.EIO
	}
	if f.readOnly && flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	// Direct I/O: the page cache of the file would hold a second copy of
	// what the loop device's filesystem caches already.
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *file) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	if f.readOnly {
		out.Mode = syscall.S_IFREG | 0o400
	}
	out.Size = uint64(f.v.Size())
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 4096
	out.Nlink = 1
	if t := f.created; t > 0 {
		out.Mtime, out.Ctime, out.Atime = uint64(t/1e9), uint64(t/1e9), uint64(t/1e9)
	}
	return 0
}

func (f *file) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && sz != uint64(f.v.Size()) {
		return syscall.EPERM // a volume's size is fixed
	}
	return f.Getattr(ctx, fh, out)
}

func (f *file) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.detached.Load() {
		return nil, syscall.EIO
	}
	size := f.v.Size()
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := int(min(int64(len(dest)), size-off))
	if _, err := f.v.ReadAt(dest[:n], off); err != nil {
		f.readErr.failed(off, n, err)
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if f.detached.Load() {
		return 0, syscall.EIO
	}
	if f.readOnly {
		return 0, syscall.EROFS
	}
	if off >= f.v.Size() {
		return 0, syscall.ENOSPC
	}
	n := int(min(int64(len(data)), f.v.Size()-off))
	if _, err := f.v.WriteAt(data[:n], off); err != nil {
		f.writeErr.failed(off, n, err)
		return 0, errno(err)
	}
	return uint32(n), 0
}

func (f *file) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if f.detached.Load() {
		return syscall.EIO
	}
	if f.readOnly {
		return 0
	}
	if err := f.v.Flush(); err != nil {
		f.syncErr.failed(0, 0, err)
		return errno(err)
	}
	return 0
}

// Flush (close(2) of a descriptor) makes the writes durable too, as a
// local disk file's close does not but a careful user expects.
func (f *file) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	return f.Fsync(ctx, fh, 0)
}

// errno maps a volume's error to what the kernel passes on.
func errno(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, stor.ErrOutOfRange):
		return syscall.EINVAL
	case errors.Is(err, stor.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, stor.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, stor.ErrLeaseHeld):
		return syscall.EACCES
	}
	return syscall.EIO
}

// Mounted is a volume presented at a directory, from Mount until
// Unmount (or an umount of the directory from outside).
type Mounted struct {
	dir  string
	path string
	file *file
	log  *slog.Logger
	done chan struct{} // closed when the server has stopped
}

// Mount presents v at dir as one file (Options.Name). A dead mount at dir
// (one whose server exited without unmounting: stat says ENOTCONN) is
// unmounted first. Mount returns once the file is reachable through the
// kernel; the mount lasts until Unmount. It does not close v.
func Mount(dir string, v *stor.Volume, o Options) (*Mounted, error) {
	d := v.Descriptor()
	if o.Name == "" {
		o.Name = d.Name
	}
	return mount(dir, v, "ndma:"+d.Name, d.Created, o)
}

// mount is Mount of any volume: fsName is what mount(8) lists as the
// source, created the file's times (Unix ns; 0 for none).
func mount(dir string, v volume, fsName string, created int64, o Options) (*Mounted, error) {
	if o.Name == "" || o.Name == "." || o.Name == ".." || filepath.Base(o.Name) != o.Name {
		return nil, fmt.Errorf("volfs: file name %q: want one path element", o.Name)
	}
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if err := cleanDead(dir, lg); err != nil {
		return nil, err
	}
	f := &file{
		v: v, readOnly: o.ReadOnly, created: created,
		readErr:  newErrLog(lg, "read"),
		writeErr: newErrLog(lg, "write"),
		syncErr:  newErrLog(lg, "fsync"),
	}
	// go-fuse's own diagnostics go to the logger too, not to the process's
	// global one.
	fuseLog := slog.NewLogLogger(lg.Handler(), slog.LevelWarn)
	fuseLog.SetFlags(0)
	srv, err := fs.Mount(dir, &root{file: f, name: o.Name}, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      fsName,
			Name:        "ndma",
			DirectMount: true, // as root, mount(2) directly: no fusermount needed
			AllowOther:  o.AllowOther,
			MaxWrite:    512 << 10, // a splice pipe holds 1 MiB, header included
			Debug:       o.Debug,
			Logger:      fuseLog,
		},
		Logger: fuseLog,
	})
	if err != nil {
		return nil, fmt.Errorf("volfs: mount %s: %w", dir, err)
	}
	m := &Mounted{dir: dir, path: filepath.Join(dir, o.Name), file: f, log: lg, done: make(chan struct{})}
	go func() {
		srv.Wait()
		close(m.done)
	}()
	// The kernel has the mount; a lookup and getattr of the file through
	// it is what a program (losetup) will do first.
	if _, err := os.Stat(m.path); err != nil {
		_, uerr := m.Unmount(time.Second)
		return nil, errors.Join(fmt.Errorf("volfs: %s not reachable once mounted: %w", m.path, err), uerr)
	}
	return m, nil
}

// Path is the file's path: the directory joined with the file's name.
func (m *Mounted) Path() string { return m.path }

// Done is closed once the mount has ended and its server has stopped:
// after Unmount, or after an umount of the directory from outside.
func (m *Mounted) Done() <-chan struct{} { return m.done }

// unmountRetry is how long Unmount waits between tries of a plain unmount.
const unmountRetry = 100 * time.Millisecond

// Unmount ends the mount within about timeout. It tries a plain unmount
// until timeout has passed; if the file is still busy then (held open: a
// loop device still attached), it detaches the mount lazily and reports
// lazy: the directory is free at once, and whoever still holds the file
// gets EIO from then on until they let go. Either way, once Unmount
// returns without an error the mount no longer uses the volume (requests
// already in progress finish), so the caller may close it. After an umount
// from outside it returns at once.
func (m *Mounted) Unmount(timeout time.Duration) (lazy bool, err error) {
	defer m.flushLogs()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-m.done:
			m.file.detached.Store(true)
			return false, nil
		default:
		}
		err = unmount(m.dir, false)
		if err == nil {
			m.file.detached.Store(true)
			// The kernel has let go of the connection: the server's loops
			// end as soon as they read that.
			select {
			case <-m.done:
			case <-time.After(max(time.Until(deadline), time.Second)):
			}
			return false, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		select {
		case <-m.done:
		case <-time.After(min(unmountRetry, left)):
		}
	}
	m.file.detached.Store(true)
	if lerr := unmount(m.dir, true); lerr != nil {
		m.file.detached.Store(false)
		return false, fmt.Errorf("volfs: unmount %s: %w; lazily: %w", m.dir, err, lerr)
	}
	m.log.Warn("mount busy (a loop device still attached?): detached lazily; the file's remaining users get I/O errors until they let go (losetup -d)",
		"dir", m.dir, "err", err)
	return true, nil
}

// flushLogs logs the I/O failures left out since the last line of each kind.
func (m *Mounted) flushLogs() {
	m.file.readErr.flush()
	m.file.writeErr.flush()
	m.file.syncErr.flush()
}

// cleanDead unmounts a dead mount at dir (its server exited without
// unmounting: the kernel answers ENOTCONN for it).
func cleanDead(dir string, lg *slog.Logger) error {
	_, err := os.Stat(dir)
	if !deadMount(err) {
		return nil
	}
	if uerr := unmount(dir, true); uerr != nil {
		return fmt.Errorf("volfs: %s is a dead mount (%w), and unmounting it failed: %w", dir, err, uerr)
	}
	lg.Warn("a dead mount was at the directory (its server had exited without unmounting): unmounted it", "dir", dir, "err", err)
	return nil
}
