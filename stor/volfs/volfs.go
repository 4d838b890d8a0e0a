// Package volfs presents an open volume (package stor) as one file in a
// FUSE filesystem, so that any program can use it — through a loop device
// (losetup), as a block device with a real filesystem on it:
//
//	ndma vol mount data /mnt/ndma &        # /mnt/ndma/data is the volume
//	losetup --find --show /mnt/ndma/data   # → /dev/loopN
//	mkfs.ext4 /dev/loopN && mount /dev/loopN /mnt/data
//
// Reads and writes of the file are the volume's; fsync(2) on it (which the
// loop driver sends for a filesystem's flushes and barriers) is the
// volume's Flush, so what ext4 considers durable is durable on every live
// replica. The file's size is the volume's and cannot change.
package volfs

import (
	"context"
	"errors"
	"io"
	"syscall"

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
	// Debug logs every FUSE request.
	Debug bool
}

// root is the mount's directory: one file.
type root struct {
	fs.Inode
	file *file
	name string
}

var _ fs.NodeOnAdder = (*root)(nil)

func (r *root) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, r.file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	r.AddChild(r.name, ch, false)
}

// file is the volume.
type file struct {
	fs.Inode
	v        volume
	readOnly bool
	created  int64 // Unix ns: the file's times
}

// volume is what file needs of a *stor.Volume.
type volume interface {
	io.ReaderAt
	io.WriterAt
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
	size := f.v.Size()
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := int(min(int64(len(dest)), size-off))
	if _, err := f.v.ReadAt(dest[:n], off); err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if f.readOnly {
		return 0, syscall.EROFS
	}
	if off >= f.v.Size() {
		return 0, syscall.ENOSPC
	}
	n := int(min(int64(len(data)), f.v.Size()-off))
	if _, err := f.v.WriteAt(data[:n], off); err != nil {
		return 0, errno(err)
	}
	return uint32(n), 0
}

func (f *file) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if f.readOnly {
		return 0
	}
	return errno(f.v.Flush())
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

// Mount presents v at dir as one file (Options.Name). It returns once the
// mount is up; the server runs until Unmount.
func Mount(dir string, v *stor.Volume, o Options) (*fuse.Server, error) {
	d := v.Descriptor()
	if o.Name == "" {
		o.Name = d.Name
	}
	r := &root{file: &file{v: v, readOnly: o.ReadOnly, created: d.Created}, name: o.Name}
	return fs.Mount(dir, r, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      "ndma:" + d.Name,
			Name:        "ndma",
			DirectMount: true, // as root, mount(2) directly: no fusermount needed
			AllowOther:  o.AllowOther,
			MaxWrite:    512 << 10, // a splice pipe holds 1 MiB, header included
			Debug:       o.Debug,
		},
	})
}
