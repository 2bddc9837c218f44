/* sim/report.c - the replay's table, curve CSV and plot.
 *
 * The table is what `make demo` prints; docs/replay.md explains each column.
 * The curve CSV has one row per arrived percent so any tool can re-plot it;
 * the PNG is drawn by gnuplot (Debian's gnuplot-nox) from that CSV.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "egpu/sim.h"

static const int checkpoints[4] = {80, 90, 100, 130};

static void print_pct(FILE *f, double v)
{
    if (v < 0)
        fprintf(f, " %9s", "-");
    else
        fprintf(f, " %9.2f", v);
}

void egpu_report_table(FILE *f, const struct egpu_policy_runs *p, size_t n)
{
    fprintf(f, "%-16s %9s %9s %9s %9s %9s %8s %8s %9s\n", "policy", "alloc@80", "alloc@90",
            "alloc@100", "alloc@130", "frag@90", "failed", "us/pod", "pods/s");
    for (size_t i = 0; i < n; i++) {
        const double *paper = p[i].published;
        double secs = 0.0, failed = 0.0, pods = 0.0;

        for (size_t s = 0; s < p[i].nruns; s++) {
            secs += p[i].runs[s].place_seconds;
            failed += (double)p[i].runs[s].failed;
            pods += (double)p[i].runs[s].arrivals;
        }
        fprintf(f, "%-16s", p[i].label);
        for (int k = 0; k < 4; k++)
            print_pct(f, egpu_replay_alloc_at(p[i].runs, p[i].nruns, checkpoints[k]));
        print_pct(f, egpu_replay_frag_at(p[i].runs, p[i].nruns, 90));
        fprintf(f, " %8.0f %8.1f %9.0f\n", failed / (double)p[i].nruns,
                pods > 0 ? 1e6 * secs / pods : 0.0, secs > 0 ? pods / secs : 0.0);
        if (paper != NULL) {
            fprintf(f, "%-16s", "  published");
            for (int k = 0; k < 4; k++)
                print_pct(f, paper[k]);
            fprintf(f, "\n%-16s", "  difference");
            for (int k = 0; k < 4; k++) {
                double v = egpu_replay_alloc_at(p[i].runs, p[i].nruns, checkpoints[k]);

                if (v < 0)
                    fprintf(f, " %9s", "-");
                else
                    fprintf(f, " %+9.2f", v - paper[k]);
            }
            fprintf(f, "\n");
        }
    }
}

void egpu_report_idle(FILE *f, const struct egpu_policy_runs *p, size_t n, uint64_t capacity_milli)
{
    static const char *const point[2] = {"100%", "end"};

    fprintf(f, "idle GPU, %% of the cluster's (whole free cards + partly used cards): usable by a "
               "trace pod now,\nstranded by CPU/memory, by GPU model, as card fragments no trace "
               "pod fits;\npartly used cards' idle GPU by their free compute: <200, 200-499, "
               "500-999 milli\n");
    fprintf(f, "%-16s %5s %7s %15s %15s %15s %15s %20s\n", "policy", "at", "idle", "usable",
            "cpu/mem", "model", "fragment", "part by free");
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            double v[12] = {0};
            size_t runs = 0;

            for (size_t s = 0; s < p[i].nruns; s++) {
                const struct egpu_replay_idle *d = &p[i].runs[s].idle[k];
                const uint64_t x[12] = {d->idle_milli,   d->usable_whole, d->usable_part,
                                        d->cpu_whole,    d->cpu_part,     d->model_whole,
                                        d->model_part,   d->frag_whole,   d->frag_part,
                                        d->part_free[0], d->part_free[1], d->part_free[2]};

                if (!d->taken)
                    continue;
                runs++;
                for (int j = 0; j < 12; j++)
                    v[j] += (double)x[j];
            }
            fprintf(f, "%-16s %5s", k == 0 ? p[i].label : "", point[k]);
            if (runs == 0 || capacity_milli == 0) {
                fprintf(f, " %7s\n", "-");
                continue;
            }
            for (int j = 0; j < 12; j++)
                v[j] = 100.0 * v[j] / (double)runs / (double)capacity_milli;
            fprintf(f, " %7.2f", v[0]);
            for (int j = 1; j < 9; j += 2)
                fprintf(f, "  %6.2f+%6.2f", v[j], v[j + 1]);
            fprintf(f, "  %6.2f %6.2f %6.2f\n", v[9], v[10], v[11]);
        }
    }
}

static int open_out(const char *path, FILE **f, struct egpu_error *err)
{
    *f = fopen(path, "w");
    if (*f == NULL)
        return egpu_error_errno(err, "%s", path);
    return 0;
}

static int close_out(const char *path, FILE *f, struct egpu_error *err)
{
    if (ferror(f) | fclose(f))
        return egpu_error_set(err, -EIO, "%s: write failed", path);
    return 0;
}

int egpu_report_csv(const char *path, const struct egpu_policy_runs *p, size_t n,
                    struct egpu_error *err)
{
    int max = 0;
    FILE *f;
    int rc = open_out(path, &f, err);

    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        for (size_t s = 0; s < p[i].nruns; s++) {
            for (int b = EGPU_REPLAY_PCT_MAX; b > max; b--) {
                if (p[i].runs[s].buckets[b].events) {
                    max = b;
                    break;
                }
            }
        }
    }
    fprintf(f, "arrived_pct");
    for (size_t i = 0; i < n; i++)
        fprintf(f, ",%s_alloc_pct,%s_frag_pct", p[i].label, p[i].label);
    fprintf(f, "\n");
    for (int b = 0; b <= max; b++) {
        fprintf(f, "%d", b);
        for (size_t i = 0; i < n; i++) {
            bool any = false;

            for (size_t s = 0; s < p[i].nruns; s++)
                any |= p[i].runs[s].buckets[b].events > 0;
            if (any) {
                /* Exact bucket only: the curve shows what happened there. */
                double a = 0.0, fr = 0.0, k = 0.0;

                for (size_t s = 0; s < p[i].nruns; s++) {
                    const struct egpu_replay_bucket *bk = &p[i].runs[s].buckets[b];

                    if (bk->events == 0)
                        continue;
                    a += bk->alloc_pct_sum / bk->events;
                    fr += bk->frag_pct_sum / bk->events;
                    k += 1.0;
                }
                fprintf(f, ",%.3f,%.3f", a / k, fr / k);
            } else {
                fprintf(f, ",,");
            }
        }
        fprintf(f, "\n");
    }
    return close_out(path, f, err);
}

int egpu_report_summary_csv(const char *path, const struct egpu_policy_runs *p, size_t n,
                            const uint64_t *seeds, struct egpu_error *err)
{
    FILE *f;
    int rc = open_out(path, &f, err);

    if (rc)
        return rc;
    fprintf(f, "policy,node_policy,card_policy,seed,arrivals,failed,alloc80,alloc90,alloc100,"
               "alloc130,frag90,place_seconds,reserved_milli,final_arrived_pct,final_alloc_pct\n");
    for (size_t i = 0; i < n; i++) {
        for (size_t s = 0; s < p[i].nruns; s++) {
            const struct egpu_replay_result *r = &p[i].runs[s];

            fprintf(f, "%s,%s,%s,%llu,%zu,%zu", p[i].label, egpu_policy_name(p[i].node_policy),
                    egpu_policy_name(p[i].card_policy), (unsigned long long)seeds[s], r->arrivals,
                    r->failed);
            for (int k = 0; k < 4; k++)
                fprintf(f, ",%.3f", egpu_replay_alloc_at(r, 1, checkpoints[k]));
            fprintf(f, ",%.3f,%.6f,%llu,%.3f,%.3f\n", egpu_replay_frag_at(r, 1, 90),
                    r->place_seconds, (unsigned long long)r->reserved_milli, r->final_arrived_pct,
                    r->final_alloc_pct);
        }
    }
    return close_out(path, f, err);
}

int egpu_report_plot(const char *csv, const char *png, const struct egpu_policy_runs *p, size_t n,
                     struct egpu_error *err)
{
    FILE *g;
    int status;

    if (system("command -v gnuplot >/dev/null 2>&1") != 0)
        return egpu_error_set(err, -ENOENT,
                              "gnuplot not found; install it (apt-get install gnuplot-nox) "
                              "for the plot; the CSV %s has the curve",
                              csv);
    g = popen("gnuplot", "w");
    if (g == NULL)
        return egpu_error_set(err, -EIO, "cannot run gnuplot: %s", strerror(errno));
    /* Three panels: the whole curve; the same zoomed on 80-130% arrived,
     * where the policies' few points of difference show; the
     * fragmentation ratio (F(M) as percent of idle GPU) beside it. */
    fprintf(g, "set terminal png size 1800,650\n");
    fprintf(g, "set output '%s'\n", png);
    fprintf(g, "set datafile separator ','\n");
    fprintf(g, "set multiplot layout 1,3 title 'Against the arrived GPU workload (openb trace)'\n");
    fprintf(g, "set xlabel 'arrived GPU request (%% of cluster capacity)'\n");
    fprintf(g, "set key left top\nset grid\n");
    for (int panel = 0; panel < 3; panel++) {
        int col = panel == 2 ? 3 : 2; /* the frag_pct columns follow the alloc_pct ones */

        if (panel == 0)
            fprintf(g, "set title 'GPU allocation ratio'\nset ylabel 'GPU allocation ratio (%%)'\n"
                       "set xrange [0:*]\nset yrange [0:100]\n");
        else if (panel == 1)
            fprintf(g, "set title 'GPU allocation ratio, 80-130%% arrived'\n"
                       "set xrange [80:130]\nset yrange [80:100]\n");
        else
            fprintf(g, "set title 'fragmentation ratio'\n"
                       "set ylabel 'fragmented idle GPU (%% of idle GPU)'\n"
                       "set xrange [0:*]\nset yrange [0:100]\nset key right top\n");
        fprintf(g, "plot ");
        for (size_t i = 0; i < n; i++)
            fprintf(g, "%s'%s' every ::1 using 1:%zu with lines lw 2 title '%s'", i ? ", " : "",
                    csv, col + 2 * i, p[i].label);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    status = pclose(g);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return egpu_error_set(err, -EIO, "gnuplot failed drawing %s", png);
    return 0;
}
