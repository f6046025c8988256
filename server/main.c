/*
 * dsjobd: daemonizing, the pid and port files, --user, signals and
 * systemd's notifications around libdsjobserver, which is the server; its
 * command line and --config-file are read by options.c. Built for systemd
 * (configure found libsystemd), it tells systemd (NOTIFY_SOCKET) when it is
 * ready and stopping.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <dsjob/server.h>

#include "options.h"

static struct dsjob_server *the_server; /* for the signal handlers */

static int
write_file_atomically(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    FILE *fp;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -1;
    fp = fopen(tmp, "w");
    if (fp == NULL)
        return -1;
    if (fputs(text, fp) < 0 || fclose(fp) != 0) {
        unlink(tmp);
        return -1;
    }
    return rename(tmp, path);
}

static void
on_stop(int sig)
{
    dsjob_server_stop(the_server, sig == SIGUSR1);
}

static void
on_hup(int sig)
{
    (void)sig;
    dsjob_server_reopen_log(the_server);
}

static void
install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

/*
 * Fork into the background. The parent waits until the child reports, on a
 * pipe, that it is serving (exit 0) or why it could not (message, exit 1),
 * so that "dsjobd -d" fails visibly when the port is taken.
 */
static int
daemonize(void)
{
    int fds[2];
    pid_t pid;
    char msg[600];
    ssize_t n;

    if (pipe(fds) < 0) {
        perror("dsjobd: pipe");
        exit(1);
    }
    pid = fork();
    if (pid < 0) {
        perror("dsjobd: fork");
        exit(1);
    }
    if (pid > 0) {
        close(fds[1]);
        n = read(fds[0], msg, sizeof(msg) - 1);
        if (n > 0 && msg[0] == 'K')
            exit(0);
        if (n > 0) {
            msg[n] = '\0';
            fprintf(stderr, "%s\n", msg + 1);
        } else {
            fprintf(stderr, "dsjobd: the daemon exited before it was ready\n");
        }
        exit(1);
    }
    close(fds[0]);
    setsid();
    if (chdir("/") < 0) {
        /* Staying in the start directory is harmless. */
    }
    return fds[1];
}

/*
 * notify_systemd sends state ("READY=1", "STOPPING=1") to the service
 * manager when there is one (NOTIFY_SOCKET is set) and dsjobd was built for
 * systemd; otherwise nothing. It is what sd_notify(3) does, one datagram to
 * the unix socket NOTIFY_SOCKET names ("@NAME" for an abstract one), written
 * here: linking libsystemd cost a fifth of every dsjobd start.
 */
static void
notify_systemd(const char *state)
{
#ifdef HAVE_SYSTEMD
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    size_t len;
    int fd;

    if (path == NULL || (path[0] != '/' && path[0] != '@'))
        return;
    len = strlen(path);
    if (len < 2 || len >= sizeof(sa.sun_path))
        return;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    (void)sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&sa,
                 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    close(fd);
#else
    (void)state;
#endif
}

static void
report_ready(int fd, const char *err)
{
    char msg[600];
    ssize_t n;

    if (fd < 0) {
        if (err != NULL)
            fprintf(stderr, "%s\n", err);
        return;
    }
    snprintf(msg, sizeof(msg), "%c%s", err ? 'E' : 'K', err ? err : "");
    n = write(fd, msg, strlen(msg));
    (void)n;
    close(fd);
}

/*
 * find_user looks --user up before anything is bound, so that a name that
 * does not exist, or a switch that needs root, is a usage error (exit 2).
 */
static void
find_user(struct opts *o)
{
    struct passwd *pw;

    pw = getpwnam(o->user);
    if (pw == NULL)
        options_die("--user: no such user '%s'", o->user);
    o->uid = pw->pw_uid;
    o->gid = pw->pw_gid;
    if (geteuid() != 0 && geteuid() != o->uid)
        options_die("--user %s: switching to another user needs root", o->user);
}

/*
 * drop_privileges switches to --user's uid, gid and supplementary groups;
 * nothing to do when dsjobd already runs as that user. glibc's setuid
 * changes every thread, the store's writer included.
 */
static int
drop_privileges(const struct opts *o, char *err, size_t errlen)
{
    if (geteuid() == o->uid && getuid() == o->uid)
        return 0;
    if (setgid(o->gid) < 0 || initgroups(o->user, o->gid) < 0 || setuid(o->uid) < 0) {
        snprintf(err, errlen, "dsjobd: --user %s: %s", o->user, strerror(errno));
        return -1;
    }
    return 0;
}
/*
 * set_file_limit sets the open-file limit to n (--file-descriptors), the
 * hard limit too when n is over it, which needs privilege; gearmand exits
 * when it cannot, and so does dsjobd.
 */
static int
set_file_limit(rlim_t n, char *err, size_t errlen)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(err, errlen, "--file-descriptors: getrlimit: %s", strerror(errno));
        return -1;
    }
    rl.rlim_cur = n;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
        rl.rlim_max = n;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(err, errlen, "--file-descriptors: cannot set the limit to %llu: %s",
                 (unsigned long long)n, strerror(errno));
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct dsjob_server_config cfg;
    struct opts o = {0};
    char err[600];
    int ready_fd = -1;
    int rc, ret = 1; /* the exit status: 1 unless the server ran and stopped cleanly */
    bool pid_written = false;

    options_parse(argc, argv, &cfg, &o);
    if (o.check_args) { /* as gearmand: the options and the config file read, nothing started */
        options_release(&o);
        return 0;
    }
    if (o.protocol != NULL)
        options_die("--protocol: gearmand's '%s' protocol module is not available; dsjobd speaks "
                    "Gearman only (its --http-port serves health, metrics and an admin API, not "
                    "jobs)",
                    o.protocol);
    if (o.user != NULL)
        find_user(&o);
    the_server = dsjob_server_new(&cfg, err, sizeof(err));
    if (the_server == NULL) {
        fprintf(stderr, "dsjobd: %s\n", err);
        ret = 2;
        goto out;
    }
    if (o.syslog)
        fprintf(stderr, "dsjobd: --syslog: dsjobd does not write to syslog; its log goes to "
                        "--log-file (stderr by default, the journal under systemd)\n");
    if (o.file_descriptors > 0 && set_file_limit(o.file_descriptors, err, sizeof(err)) < 0) {
        fprintf(stderr, "dsjobd: %s\n", err);
        goto out;
    }
    if (o.daemon_mode)
        ready_fd = daemonize();
    install_signals();
    rc = dsjob_server_bind(the_server);
    if (rc != DSJOB_OK) {
        snprintf(err, sizeof(err), "dsjobd: %s", dsjob_server_errmsg(the_server));
        report_ready(ready_fd, err);
        goto out;
    }
    if (o.pid_file != NULL) {
        char text[32];

        snprintf(text, sizeof(text), "%ld\n", (long)getpid());
        if (write_file_atomically(o.pid_file, text) < 0) {
            snprintf(err, sizeof(err), "dsjobd: cannot write pid file '%s': %s", o.pid_file,
                     strerror(errno));
            report_ready(ready_fd, err);
            goto out;
        }
        pid_written = true;
    }
    /* Before the port file, which tests wait for: both are there once it is. */
    if (o.http_port_file != NULL) {
        char text[32];

        snprintf(text, sizeof(text), "%d\n", dsjob_server_http_port(the_server));
        if (write_file_atomically(o.http_port_file, text) < 0) {
            snprintf(err, sizeof(err), "dsjobd: cannot write HTTP port file '%s': %s",
                     o.http_port_file, strerror(errno));
            report_ready(ready_fd, err);
            goto out;
        }
    }
    if (o.port_file != NULL) {
        char text[32];

        snprintf(text, sizeof(text), "%d\n", dsjob_server_port(the_server));
        if (write_file_atomically(o.port_file, text) < 0) {
            snprintf(err, sizeof(err), "dsjobd: cannot write port file '%s': %s", o.port_file,
                     strerror(errno));
            report_ready(ready_fd, err);
            goto out;
        }
    }
    if (o.user != NULL && drop_privileges(&o, err, sizeof(err)) < 0) {
        report_ready(ready_fd, err);
        goto out;
    }
    if (o.daemon_mode) {
        int null = open("/dev/null", O_RDWR);

        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            if (strcmp(cfg.log_file, "stderr") != 0)
                dup2(null, 2);
            if (null > 2)
                close(null);
        }
    }
    report_ready(ready_fd, NULL);
    notify_systemd("READY=1"); /* bound, files written, user switched: as --daemon's parent */
    rc = dsjob_server_run(the_server);
    notify_systemd("STOPPING=1");
    if (rc != DSJOB_OK)
        fprintf(stderr, "dsjobd: %s\n", dsjob_server_errmsg(the_server));
    else
        ret = 0;
out:
    /* Every exit after the options goes through here, so nothing leaks (LeakSanitizer). */
    if (pid_written)
        unlink(o.pid_file);
    dsjob_server_free(the_server);
    options_release(&o);
    return ret;
}
