/* vcuda/inspect_main.c - egpu-vcuda-inspect [-o text|json] DIR: what a
 * container's shared regions hold (docs/vcuda.md, "Inspecting a container").
 *
 * DIR is a container's allocation directory (the agent's
 * <alloc-root>/<dir>); its limits come from DIR/vcuda.conf, read by the
 * interposer's own loader (config.c), which also picks the regions'
 * directory (DIR/shared when that is a directory, else DIR).
 *
 * DESIGN, read-only: the tool runs as root on the node, and every process
 * of the container can write the regions' directory. So each region file is
 * opened with O_PATH | O_NOFOLLOW first (a link planted at the name is
 * refused, nothing is opened through it), must be a regular file with one
 * link (fstat), and only then is opened for reading, through
 * /proc/self/fd (the same inode: a FIFO or device swapped in meanwhile is
 * never opened), with O_RDONLY | O_NONBLOCK, and O_NOATIME where allowed. It is read with pread
 * into a buffer, never mapped, so a truncation meanwhile gives a short read, not a SIGBUS. Nothing
 * is written, locked or created; the decoders bound everything (inspect.c, region.c).
 *
 * DESIGN, liveness: a slot names its process by pid in the container's pid
 * namespace and start time (ticks since boot, the same in every
 * namespace). It is judged as reclamation does (egpu__vcuda_proc_is_alive)
 * in this namespace first; when that finds it gone, the process is looked
 * for by start time among this namespace's processes, matching the last
 * pid of /proc/<pid>/status NSpid (its pid in its own namespace), so that
 * the tool gives the same answer on the node as inside the container.
 *
 * Exit status: 0; 1 when DIR, its vcuda.conf or a region the limits call
 * for is missing, unreadable or corrupted (the message names the file and
 * why); 2 for bad usage.
 */
#define _GNU_SOURCE /* O_PATH, O_NOATIME */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egpu/cli.h" /* EGPU_VERSION_LINE only: this binary links no src/net */
#include "egpu/log.h"
#include "inspect.h"

#define PROG "egpu-vcuda-inspect"

static const char usage_text[] =
    "Usage: " PROG " [-o text|json] DIR\n"
    "\n"
    "Print what a container's shared regions hold: the limits (DIR/vcuda.conf), the device\n"
    "memory of each process per card (vcuda-memory.shm) and the compute bucket of each card\n"
    "(vcuda-core.shm). DIR is the container's allocation directory, e.g.\n"
    "/var/lib/elastic-gpu/alloc/<dir>; the regions are in DIR/shared when that is a\n"
    "directory, else in DIR. The files are only read: nothing is written, locked or created.\n"
    "\n"
    "  -o, --output FORMAT   text (default) or json (apiVersion " EGPU_VCUDA_INSPECT_API ")\n"
    "  -h, --help            this help\n"
    "  --version             the version\n"
    "\n"
    "Exit status: 0; 1 when DIR, vcuda.conf or a region is missing, unreadable or corrupted\n"
    "(the message names the file); 2 for bad usage.\n";

static int bad_usage(const char *what)
{
    fprintf(stderr, PROG ": %s\n%s", what, usage_text);
    return 2;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Read path (see DESIGN, read-only) into buf, at most cap bytes. Returns
 * the bytes read, or -errno with err naming the file and why: -ENOENT when
 * there is no file. */
static long read_region(const char *path, void *buf, size_t cap, struct egpu_error *err)
{
    char proc[64];
    struct stat st, st2;
    size_t len = 0;
    int pfd, fd;
    long rc;

    pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0)
        return egpu_error_set(err, -errno, "%s: %s", path,
                              errno == ENOENT ? "no such file" : strerror(errno));
    if (fstat(pfd, &st) != 0) {
        rc = egpu_error_errno(err, "%s: fstat", path);
        goto out_pfd;
    }
    if (S_ISLNK(st.st_mode)) {
        rc = egpu_error_set(err, -ELOOP, "%s: a symbolic link (refused, not followed)", path);
        goto out_pfd;
    }
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
        rc = egpu_error_set(err, -EINVAL, "%s: %s (refused)", path,
                            !S_ISREG(st.st_mode) ? "not a regular file" : "has other hard links");
        goto out_pfd;
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
    /* No O_NOFOLLOW here: /proc/self/fd/N is a link to the inode checked above. */
    fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && errno == EPERM) /* O_NOATIME needs the file's owner or CAP_FOWNER */
        fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        rc = egpu_error_errno(err, "%s: cannot open for reading", path);
        goto out_pfd;
    }
    if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino) {
        rc = egpu_error_set(err, -EINVAL, "%s: changed while opened (refused)", path);
        goto out_fd;
    }
    while (len < cap) {
        ssize_t n = pread(fd, (char *)buf + len, cap - len, (off_t)len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = egpu_error_errno(err, "%s: read", path);
            goto out_fd;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    rc = (long)len;
out_fd:
    close(fd);
out_pfd:
    close(pfd);
    return rc;
}

/* ---- Liveness across pid namespaces (see DESIGN). ---- */

struct proc_entry {
    int32_t pid; /* in this namespace */
    uint64_t start;
};

struct proc_table {
    struct proc_entry *e;
    size_t n;
    bool loaded;
};

static void proc_table_load(struct proc_table *t)
{
    size_t cap = 0;
    struct dirent *d;
    DIR *dir;

    t->loaded = true;
    dir = opendir("/proc");
    if (dir == NULL)
        return;
    while ((d = readdir(dir)) != NULL) {
        char *end;
        long pid = strtol(d->d_name, &end, 10);
        uint64_t start;
        bool zombie;

        if (*end != '\0' || pid <= 0 || pid > INT32_MAX)
            continue;
        if (egpu__vcuda_proc_start((pid_t)pid, &start, &zombie) != 0 || zombie)
            continue;
        if (t->n == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            struct proc_entry *ne = realloc(t->e, ncap * sizeof(*ne));

            if (ne == NULL)
                break;
            t->e = ne;
            cap = ncap;
        }
        t->e[t->n].pid = (int32_t)pid;
        t->e[t->n].start = start;
        t->n++;
    }
    closedir(dir);
}

/* The last pid of /proc/<pid>/status's NSpid line (its pid in the
 * innermost namespace), or 0. */
static int32_t ns_pid(int32_t pid)
{
    char path[64], buf[4096];
    const char *p, *last = NULL;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    p = strstr(buf, "\nNSpid:");
    if (p == NULL)
        return 0;
    for (p += 7; *p && *p != '\n'; p++) {
        if (*p >= '0' && *p <= '9' && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == ':'))
            last = p;
    }
    return last ? (int32_t)strtol(last, NULL, 10) : 0;
}

/* How slot sl's process stands, and its pid here (0 = unknown). */
static enum egpu__vcuda_liveness judge(const struct egpu__vcuda_region_view_slot *sl,
                                       struct proc_table *t, int32_t *here)
{
    *here = 0;
    if (sl->pid <= 0)
        return EGPU_VCUDA_DEAD;
    if (egpu__vcuda_proc_is_alive(sl->pid, sl->start)) {
        *here = sl->pid;
        return EGPU_VCUDA_ALIVE;
    }
    if (sl->start == 0)
        return EGPU_VCUDA_DEAD;
    if (!t->loaded)
        proc_table_load(t);
    for (size_t i = 0; i < t->n; i++) {
        if (t->e[i].start == sl->start && ns_pid(t->e[i].pid) == sl->pid &&
            egpu__vcuda_proc_is_alive(t->e[i].pid, sl->start)) {
            *here = t->e[i].pid;
            return EGPU_VCUDA_ALIVE;
        }
    }
    return EGPU_VCUDA_DEAD;
}

/* ---- main ---- */

static int join(char *out, size_t cap, const char *dir, const char *name)
{
    int w = snprintf(out, cap, "%s/%s", dir, name);

    return w < 0 || (size_t)w >= cap ? -ENAMETOOLONG : 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    static struct egpu__vcuda_region_view mem; /* about 150 KiB */
    static struct egpu__vcuda_report r;
    static char conf_path[PATH_MAX], mem_path[PATH_MAX], core_path[PATH_MAX];
    struct egpu__vcuda_config cfg;
    struct egpu__vcuda_core_view core;
    struct proc_table procs = {0};
    struct egpu_error err = {0};
    struct stat st;
    bool json = false, need_mem, need_core;
    unsigned char *buf;
    size_t cap;
    long len;
    int c, rc = 0;

    opterr = 0;
    while ((c = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (c == 'V') {
            fputs(EGPU_VERSION_LINE(PROG), stdout);
            return 0;
        }
        if (c == 'o' && strcmp(optarg, "json") == 0)
            json = true;
        else if (c == 'o' && strcmp(optarg, "text") == 0)
            json = false;
        else if (c == 'o')
            return bad_usage("unknown output format; allowed: text, json");
        else
            return bad_usage("unknown option");
    }
    if (argc - optind != 1)
        return bad_usage(argc - optind == 0 ? "DIR is required" : "one DIR only");
    r.dir = argv[optind];
    if (stat(r.dir, &st) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", r.dir, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, PROG ": %s: not a directory\n", r.dir);
        return 1;
    }

    /* The limits, by the interposer's own loader, with no environment. */
    if (egpu__vcuda_config_load(&cfg, r.dir, NULL, &err) != 0) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    r.cfg = &cfg;
    r.region_dir = cfg.region_dir;
    if (cfg.source == EGPU_VCUDA_SRC_FILE &&
        join(conf_path, sizeof(conf_path), r.dir, EGPU_VCUDA_CONF_NAME) == 0)
        r.conf_path = conf_path;
    if (join(mem_path, sizeof(mem_path), cfg.region_dir, EGPU_VCUDA_REGION_NAME) != 0 ||
        join(core_path, sizeof(core_path), cfg.region_dir, EGPU_VCUDA_CORE_REGION_NAME) != 0) {
        fprintf(stderr, PROG ": %s: path too long\n", cfg.region_dir);
        return 1;
    }
    r.mem_path = mem_path;
    r.core_path = core_path;
    need_mem = cfg.source != EGPU_VCUDA_SRC_NONE && cfg.has_memory;
    need_core = cfg.source != EGPU_VCUDA_SRC_NONE && cfg.has_core && cfg.core_pct < 100;

    cap = egpu__vcuda_region_file_bytes() + 1; /* one more: a file grown is seen */
    if (cap < egpu__vcuda_core_file_bytes())
        cap = egpu__vcuda_core_file_bytes();
    buf = malloc(cap);
    if (buf == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }

    len = read_region(mem_path, buf, egpu__vcuda_region_file_bytes() + 1, &err);
    if (len >= 0 && egpu__vcuda_region_decode(buf, (size_t)len, &mem, &err) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", mem_path, err.msg);
        rc = 1;
    } else if (len >= 0) {
        r.mem = &mem;
    } else if (len != -ENOENT || need_mem) {
        fprintf(stderr, PROG ": %s%s\n", err.msg,
                len == -ENOENT ? " (no process of the container has used a limited card yet?)"
                               : "");
        rc = 1;
    }

    len = read_region(core_path, buf, egpu__vcuda_core_file_bytes(), &err);
    if (len >= 0 && egpu__vcuda_core_decode(buf, (size_t)len, &core, &err) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", core_path, err.msg);
        rc = 1;
    } else if (len >= 0) {
        r.core = &core;
    } else if (len != -ENOENT || need_core) {
        fprintf(stderr, PROG ": %s%s\n", err.msg,
                len == -ENOENT ? " (no process of the container has launched a kernel yet?)" : "");
        rc = 1;
    }
    r.now_ns = mono_ns();
    free(buf);
    if (rc != 0)
        return rc;

    for (unsigned i = 0; r.mem != NULL && i < mem.nslots && i < EGPU_VCUDA_REGION_SLOTS; i++)
        r.alive[i] = judge(&mem.slots[i], &procs, &r.host_pid[i]);
    free(procs.e);

    if (json)
        egpu__vcuda_report_json(stdout, &r);
    else
        egpu__vcuda_report_text(stdout, &r);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, PROG ": writing the report: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
