/*
 * A main() for fuzz targets when libFuzzer is not linked: run the target
 * on every file named on the command line or found in the named
 * directories, and print TAP, one line per corpus directory or file.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "tap.h"

static int
run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    unsigned char *buf;
    long len;

    if (fp == NULL)
        return -1;
    fseek(fp, 0, SEEK_END);
    len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, fp) != (size_t)len) {
        fclose(fp);
        free(buf);
        return -1;
    }
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    return 0;
}

int
main(int argc, char **argv)
{
    int i;

    for (i = 1; i < argc; i++) {
        struct stat st;
        DIR *dir;
        struct dirent *de;
        int n = 0, bad = 0;

        if (stat(argv[i], &st) == 0 && !S_ISDIR(st.st_mode)) {
            tap_ok(run_file(argv[i]) == 0, "replayed %s", argv[i]);
            continue;
        }
        dir = opendir(argv[i]);
        if (dir == NULL) {
            tap_ok(0, "corpus %s exists", argv[i]);
            continue;
        }
        while ((de = readdir(dir)) != NULL) {
            char path[4096];

            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            if (run_file(path) < 0)
                bad++;
            n++;
        }
        closedir(dir);
        tap_ok(n > 0 && bad == 0, "replayed %d inputs from %s", n, argv[i]);
    }
    return tap_done();
}
