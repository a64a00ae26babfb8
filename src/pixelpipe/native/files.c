/* Reading many small files in one call, without the GIL (see readers/_files.py).

pp_file_sizes stats each path; pp_read_files reads each file whole into the buffer the caller
made for it (its size from pp_file_sizes). Called through ctypes' CDLL, which releases the GIL
for the whole call: a chunk of files costs the interpreter two calls, not four per file. A
file's outcome is its errno (0: read; EFBIG: its size is not the one given, it changed since
the stat; EISDIR / ENOENT / ...: as the system says). Only regular files are read: anything
else (a FIFO, a device) is refused with EINVAL before it is opened for reading, so a FIFO
named like an image cannot block a reader thread. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* sizes[i] = the size of paths[i] in bytes, or -errno (-EINVAL: not a regular file). Returns how
   many sizes fall outside [smallest, largest] (the errors among them): 0 for the usual chunk,
   whose files the caller then reads without looking at each size. */
int64_t pp_file_sizes(const char *const *paths, int64_t n, int64_t *sizes, int64_t smallest, int64_t largest)
{
    int64_t outside = 0;
    for (int64_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0)
            sizes[i] = -(int64_t)errno;
        else if (!S_ISREG(st.st_mode))
            sizes[i] = -(int64_t)EINVAL;
        else
            sizes[i] = (int64_t)st.st_size;
        outside += sizes[i] < smallest || sizes[i] > largest;
    }
    return outside;
}

static int read_one(const char *path, char *out, int64_t size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return err;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return EINVAL;
    }
    int64_t done = 0;
    int err = 0;
    while (done < size) {
        ssize_t got = read(fd, out + done, (size_t)(size - done));
        if (got < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (got == 0) {
            err = EFBIG; /* shorter than its stat said: it changed */
            break;
        }
        done += got;
    }
    if (!err) { /* longer than its stat said: it changed */
        char extra;
        ssize_t more = read(fd, &extra, 1);
        if (more > 0)
            err = EFBIG;
    }
    close(fd);
    return err;
}

/* outs[i]: a buffer of sizes[i] bytes for paths[i]; status[i] = 0 or an errno. Returns how many
   statuses are not 0. */
int64_t pp_read_files(const char *const *paths, int64_t n, char *const *outs, const int64_t *sizes,
                      int64_t *status)
{
    int64_t failed = 0;
    for (int64_t i = 0; i < n; i++) {
        status[i] = sizes[i] < 0 ? -sizes[i] : read_one(paths[i], outs[i], sizes[i]);
        failed += status[i] != 0;
    }
    return failed;
}
