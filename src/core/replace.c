/*
 * replace.c - writes a file so that a failure never loses the old one: the
 * bytes go to a new temporary file in the target's directory (the target's
 * name, ".tmp" and six random characters, created exclusively), which is
 * flushed, fsync'ed and closed, then renamed over the target. rename() is
 * atomic within a directory, so the target holds either its old bytes or
 * all the new ones; on any failure the temporary is removed.
 *
 * The temporary is created with mode 0666 less the umask, as a plain new
 * file would be, or given the old file's permission bits when there was
 * one. A symbolic link is followed: the file it points to is replaced, in
 * its own directory, and the link stays; a dangling link's target is
 * created, as fopen would. A target that exists and is not a
 * regular file (a device such as /dev/null, a FIFO) cannot be replaced by a
 * rename: it is written in place.
 *
 * An existing file the process may not write is refused, as fopen refuses
 * it, though the rename could replace it.
 *
 * Every system call that can fail goes through one countdown (the test
 * hook ot__replace_fail_at), so tests and the fuzzer can fail each in turn
 * and check the old file every time.
 */
#define _DEFAULT_SOURCE   /* realpath, readlink, fchmod */
#include "internal.h"
#include "replace.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE 65536

struct ot__replace {
    const char *fn, *path;        /* for errors: the op and the caller's path */
    char *target;                 /* path, or the file a symlink points to */
    char *tmp;                    /* NULL: written in place (not a regular file) */
    int fd;
    size_t used;
    unsigned char buf[BUF_SIZE];
};

/* ---- the failure hook ---------------------------------------------------- */

static _Thread_local long fail_countdown;   /* 0: off; 1: the next call fails */
static _Thread_local long sys_calls;
static _Thread_local int fail_errno;

void ot__replace_fail_at(long n, int err)
{
    fail_countdown = n > 0 ? n : 0;
    fail_errno = err;
    sys_calls = 0;
}

long ot__replace_calls(void) { return sys_calls; }

/* Whether this call is the one the hook fails (errno set). */
static bool injected(void)
{
    sys_calls++;
    if (fail_countdown == 0 || --fail_countdown != 0)
        return false;
    errno = fail_errno;
    return true;
}

/* ---- opening ------------------------------------------------------------- */

static int io_error(const ot__replace *w, const char *what, int err)
{
    return ot__err_set(OT_EIO, NULL, 0, w->fn, "'%s': %s: %s", w->path, what, strerror(err));
}

/* A copy of path in memory of ot__malloc's (NULL: errno ENOMEM). */
static char *path_copy(const char *path)
{
    size_t n = strlen(path) + 1;
    char *p = ot__malloc(n);
    if (p) memcpy(p, path, n);
    else errno = ENOMEM;
    return p;
}

/* What the symbolic link at link points to, a relative text taken from
 * the link's directory (as the kernel reads it); NULL with errno. */
static char *link_text(const char *link)
{
    const char *slash = strrchr(link, '/');
    size_t dir = slash ? (size_t)(slash - link) + 1 : 0;
    for (size_t size = 256;; size *= 2) {   /* readlink truncates silently */
        char *p = ot__malloc(dir + size);
        if (!p) {
            errno = ENOMEM;
            return NULL;
        }
        ssize_t n = readlink(link, p + dir, size);
        if (n >= 0 && (size_t)n < size) {
            p[dir + (size_t)n] = '\0';
            if (p[dir] == '/') memmove(p, p + dir, (size_t)n + 1);
            else memcpy(p, link, dir);
            return p;
        }
        free(p);
        if (n < 0) return NULL;
    }
}

/* Links followed at most before a chain counts as a loop (Linux's limit). */
#define MAX_LINKS 40

/* The end of the chain of symbolic links from path when realpath cannot
 * name it because it does not exist yet (a dangling link: fopen and
 * numpy.save create its target, so a save does too); NULL with errno
 * (ELOOP past MAX_LINKS links). */
static char *dangling_target(const char *path)
{
    char *at = path_copy(path);
    for (int links = 0; at && links < MAX_LINKS; links++) {
        struct stat st;
        if (lstat(at, &st) != 0 || !S_ISLNK(st.st_mode))
            return at;   /* missing: the file to create (its directory's errors come then) */
        char *next = link_text(at);
        free(at);
        at = next;
    }
    if (at) errno = ELOOP;
    free(at);
    return NULL;
}

/* w->target: the file that path names, through symbolic links, existing
 * or not (then the file the last link names is created). */
static int resolve(ot__replace *w)
{
    struct stat st;
    if (lstat(w->path, &st) == 0 && S_ISLNK(st.st_mode)) {
        w->target = realpath(w->path, NULL);
        if (!w->target && errno == ENOENT) w->target = dangling_target(w->path);
    } else {
        w->target = path_copy(w->path);
    }
    if (w->target) return 0;
    if (errno == ENOMEM)
        return ot__err_set(OT_ENOMEM, NULL, 0, w->fn, "cannot allocate a path");
    return io_error(w, "cannot follow the symbolic link", errno);
}

/* Six characters of [0-9A-Za-z] that differ between processes, threads
 * and calls (the exclusive create settles any collision). */
static void random_suffix(char *out)
{
    static const char digits[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static atomic_uint counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t v = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
                 (uint64_t)atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15u ^
                 (uint64_t)(uintptr_t)out;
    v *= 0xD6E8FEB86659FD93u;
    for (int i = 0; i < 6; i++, v /= 62)
        out[i] = digits[v % 62];
    out[6] = '\0';
}

/* The temporary, created exclusively: 0666 less the umask for a new file
 * (what fopen gives), 0600 until fchmod gives it the old file's bits. */
/* A temporary name beside the target into w->tmp: the target's name +
 * ".tmp" + 6 random characters, or, short, ".ot.tmp" + 6 in its directory
 * (a name within 10 bytes of the file system's limit had no room for the
 * long form: every save of such a file failed). */
static void temporary_name(ot__replace *w, bool shortname)
{
    size_t n = strlen(w->target), at;
    const char *slash = strrchr(w->target, '/');
    size_t dir = slash ? (size_t)(slash - w->target) + 1 : 0;
    if (shortname) {
        memcpy(w->tmp, w->target, dir);
        memcpy(w->tmp + dir, ".ot.tmp", 7);
        at = dir + 7;
    } else {
        memcpy(w->tmp, w->target, n);
        memcpy(w->tmp + n, ".tmp", 4);
        at = n + 4;
    }
    random_suffix(w->tmp + at);
}

static int create_temporary(ot__replace *w, const struct stat *old)
{
    w->tmp = ot__malloc(strlen(w->target) + 16);
    if (!w->tmp)
        return ot__err_set(OT_ENOMEM, NULL, 0, w->fn, "cannot allocate a path");
    bool shortname = false;
    for (int tries = 0; tries < 100; tries++) {
        temporary_name(w, shortname);
        w->fd = injected() ? -1 : open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                                        old ? 0600 : 0666);
        if (w->fd < 0 && errno == ENAMETOOLONG && !shortname) {
            shortname = true;
            continue;
        }
        if (w->fd >= 0 || errno != EEXIST)
            break;
    }
    if (w->fd < 0) {
        int err = errno;
        free(w->tmp);
        w->tmp = NULL;
        return ot__err_set(OT_EIO, NULL, 0, w->fn, "cannot open '%s' for writing: cannot create "
                           "a temporary file beside it: %s", w->path, strerror(err));
    }
    if (old && (injected() || fchmod(w->fd, old->st_mode & 07777) != 0))
        return io_error(w, "cannot set the temporary file's mode", errno);
    return 0;
}

/* An existing non-regular file (a device, a FIFO) is opened as it is. */
static int open_in_place(ot__replace *w)
{
    w->fd = injected() ? -1 : open(w->target, O_WRONLY | O_CLOEXEC);
    if (w->fd < 0)
        return ot__err_set(OT_EIO, NULL, 0, w->fn, "cannot open '%s': %s", w->path,
                           strerror(errno));
    return 0;
}

/* An existing regular file that this process may not write (mode 0444, say)
 * is refused, as fopen and numpy.save refuse it: the rename needs only the
 * directory's permission, so it replaced a write-protected file without a
 * word. (root may write any file, and access says so.) A file gone since
 * the stat is no reason to stop: the save creates it. */
static int check_writable(ot__replace *w)
{
    if (!injected() && access(w->target, W_OK) == 0) return 0;
    int err = errno;
    if (err == ENOENT) return 0;
    return ot__err_set(OT_EIO, NULL, 0, w->fn, "cannot open '%s' for writing: %s", w->path,
                       strerror(err));
}

ot__replace *ot__replace_open(const char *fn, const char *path)
{
    ot__replace *w = ot__malloc(sizeof *w);
    if (!w) {
        ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate a write buffer");
        return NULL;
    }
    *w = (ot__replace){.fn = fn, .path = path, .fd = -1};
    struct stat st;
    int rc = resolve(w);
    bool exists = rc == 0 && stat(w->target, &st) == 0;
    if (rc == 0 && exists && S_ISREG(st.st_mode))
        rc = check_writable(w);
    if (rc == 0)
        rc = exists && !S_ISREG(st.st_mode) ? open_in_place(w)
                                            : create_temporary(w, exists ? &st : NULL);
    if (rc != 0) {
        ot__replace_end(w, rc);
        return NULL;
    }
    return w;
}

/* ---- writing ------------------------------------------------------------- */

/* All of p[0..n) to the file, through short writes and signals. */
static int write_all(ot__replace *w, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = injected() ? -1 : write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return io_error(w, "write failed", k < 0 ? errno : EIO);
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int ot__replace_write(ot__replace *w, const void *p, size_t n)
{
    if (w->used + n > BUF_SIZE) {
        int rc = write_all(w, w->buf, w->used);
        w->used = 0;
        if (rc != 0)
            return rc;
        if (n > BUF_SIZE)
            return write_all(w, p, n);
    }
    memcpy(w->buf + w->used, p, n);
    w->used += n;
    return 0;
}

/* ---- ending -------------------------------------------------------------- */

/* Syncs the directory that now names the file, so that the rename itself
 * survives a crash. Best effort: the rename has already replaced the old
 * file, so there is nothing left to protect, and some filesystems refuse
 * to sync a directory (EINVAL). */
static void sync_directory(const char *target)
{
    const char *slash = strrchr(target, '/');
    char *dir = slash ? ot__malloc((size_t)(slash - target) + 2) : NULL;
    if (slash && !dir)
        return;
    if (dir) {
        memcpy(dir, target, (size_t)(slash - target) + 1);
        dir[slash == target ? 1 : slash - target] = '\0';
    }
    int fd = open(dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* The buffered bytes written, the file synced (a regular file only: a
 * device or FIFO has nothing to sync) and closed. */
static int flush_and_close(ot__replace *w)
{
    int rc = write_all(w, w->buf, w->used);
    if (rc == 0 && w->tmp && (injected() || fsync(w->fd) != 0))
        rc = io_error(w, "cannot sync the file to disk", errno);
    bool failed = injected();     /* the real close still runs: no fd leaks */
    int err = errno;
    if (close(w->fd) != 0 && !failed) {
        failed = true;
        err = errno;
    }
    w->fd = -1;
    if (failed && rc == 0)
        rc = io_error(w, "write failed on close", err);
    return rc;
}

int ot__replace_end(ot__replace *w, int rc)
{
    if (rc == 0 && w->fd >= 0)
        rc = flush_and_close(w);
    if (rc == 0 && w->tmp) {
        if (injected() || rename(w->tmp, w->target) != 0)
            rc = io_error(w, "cannot rename the temporary file over it", errno);
        else {
            free(w->tmp);
            w->tmp = NULL;
            sync_directory(w->target);
        }
    }
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp)
        unlink(w->tmp);
    free(w->tmp);
    free(w->target);
    free(w);
    return rc;
}
