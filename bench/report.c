/*
 * report.c - the benchmark's three outputs: a plain-text table for the
 * terminal, bench/results.csv for tools, and the markdown table that
 * README.md shows (bench/results.md), machine, ISA and the reference loops'
 * ISA included. Each reference is named with the store mode that won where
 * both were timed.
 */
#include "bench.h"

#include <string.h>

/* fused/ref: the median of the runs' ratios where they were kept. */
double bench_ratio(const bench_row *r)
{
    return r->ratio > 0 ? r->ratio : r->fused / r->ref;
}

const char *bench_verdict(const bench_row *r)
{
    if (r->wrong) return "WRONG";
    if (r->ref <= 0) return "n/a";
    if (r->c->beat_unfused && !(r->unfused > r->fused)) return "MISS";
    return bench_ratio(r) <= r->c->target ? "PASS" : "MISS";
}

static const char *unit(const bench_row *r) { return r->c->us ? "us" : "ms"; }

static const char *const store_names[STORE_MODES] = {"ordinary stores", "streaming"};

/* The reference's label, with the store mode that won where both were
 * timed. */
static const char *ref_text(char *buf, size_t size, const bench_row *r)
{
    if (r->ref_store < 0) return r->c->ref_label;
    snprintf(buf, size, "%s (%s)", r->c->ref_label, store_names[r->ref_store]);
    return buf;
}

/* A time, or "-" when it was not measured. */
static const char *fmt_time(char *buf, size_t size, const bench_row *r, double v)
{
    if (v < 0) return "-";
    snprintf(buf, size, r->c->us || v < 1 ? "%.3f" : "%.2f", v);
    return buf;
}

static const char *fmt_ratio(char *buf, size_t size, double num, double den)
{
    if (num < 0 || den <= 0) return "-";
    snprintf(buf, size, "%.2f", num / den);
    return buf;
}

static const char *fmt_target(char *buf, size_t size, const bench_row *r)
{
    snprintf(buf, size, "<= %.2fx ref%s", r->c->target, r->c->beat_unfused ? ", < unf" : "");
    return buf;
}

static const char *fmt_err(char *buf, size_t size, double err)
{
    if (err < 0) return "-";
    snprintf(buf, size, "%.1e", err);
    return buf;
}

/* "fused/unfused" kernels per call, or "-". */
static const char *fmt_kernels(char *buf, size_t size, const bench_row *r)
{
    if (r->kernels < 0 || r->kernels_unfused < 0) return "-";
    snprintf(buf, size, "%ld/%ld", r->kernels, r->kernels_unfused);
    return buf;
}

/* The cells of one row, shared by the three writers. */
typedef struct cells {
    char fused[24], unfused[24], ref[24], ratio[24], gain[24], fused2[24], target[32], err[24];
    char kern[48], rtext[160], first[24];
    const char *pf, *pu, *pr, *pq, *pg, *p2, *pt, *pe, *pk, *prt, *p1;
} cells;

static void row_cells(cells *x, const bench_row *r)
{
    x->pf = fmt_time(x->fused, sizeof x->fused, r, r->fused);
    x->pu = fmt_time(x->unfused, sizeof x->unfused, r, r->unfused);
    x->pr = fmt_time(x->ref, sizeof x->ref, r, r->ref);
    x->pq = fmt_ratio(x->ratio, sizeof x->ratio, r->ref > 0 ? bench_ratio(r) : -1, 1);
    x->pg = fmt_ratio(x->gain, sizeof x->gain, r->unfused, r->fused);
    x->p2 = fmt_time(x->fused2, sizeof x->fused2, r, r->fused2);
    x->pt = fmt_target(x->target, sizeof x->target, r);
    x->pe = fmt_err(x->err, sizeof x->err, r->err);
    x->pk = fmt_kernels(x->kern, sizeof x->kern, r);
    x->prt = ref_text(x->rtext, sizeof x->rtext, r);
    x->p1 = fmt_time(x->first, sizeof x->first, r, r->first);
}

static void machine_lines(FILE *f, const bench_machine *m, const char *prefix)
{
    fprintf(f, "%smachine: %s; ISA: %s; reference loops: %s; backend: %s; %s\n", prefix,
            m->cpu, m->isa, m->ref_isa, m->backend, m->date);
    fprintf(f, "%sgemm (optree's dots and the cblas references): %s\n", prefix, m->gemm);
    fprintf(f, "%smedians of %d runs after a warm-up, each run right after an untimed call of "
               "its own variant (fused/ref: of the runs' ratios)%s; "
               "fused, unfused and ref: 1 thread; "
               "fused 2T: threads = 2\n",
            prefix, m->runs, m->quick ? " (--quick sizes: a smoke test, not a measurement)" : "");
}

void report_text(FILE *f, const bench_machine *m, const bench_row *rows, int n)
{
    fputc('\n', f);
    machine_lines(f, m, "");
    fprintf(f, "\n%-3s %-44s %-9s %-4s %9s %9s %9s %9s %9s %9s %-19s %-6s %-11s %-11s %s\n", "id",
            "workload", "size", "unit", "fused", "unfused", "ref", "fused/ref", "unf/fused",
            "fused 2T", "target", "result", "max rel err", "kernels f/u", "first call");
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cells x;
        row_cells(&x, r);
        fprintf(f, "%-3s %-44.44s %-9s %-4s %9s %9s %9s %9s %9s %9s %-19s %-6s %-11s %-11s %s\n",
                r->c->id, r->c->label, r->size, unit(r), x.pf, x.pu, x.pr, x.pq, x.pg, x.p2,
                x.pt, bench_verdict(r), x.pe, x.pk, x.p1);
    }
    fprintf(f, "\nreference loops (%s, 1 thread; the faster store mode where both ran):\n",
            m->ref_isa);
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cells x;
        row_cells(&x, r);
        fprintf(f, "  %s %s: %s", r->c->id, r->c->label, x.prt);
        if (r->ref_store >= 0)
            fprintf(f, "; %s: %s %s", store_names[!r->ref_store],
                    fmt_time(x.ref, sizeof x.ref, r, r->ref_other), unit(r));
        fputc('\n', f);
    }
}

void report_csv(FILE *f, const bench_row *rows, int n)
{
    fputs("id,workload,size,unit,fused,unfused,ref,fused_over_ref,unfused_over_fused,"
          "fused_2t,target,result,max_rel_err,reference,kernels_fused,kernels_unfused,first_call\n",
          f);
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cells x;
        row_cells(&x, r);
        fprintf(f, "%s,\"%s\",%s,%s,%s,%s,%s,%s,%s,%s,\"%s\",%s,%s,\"%s\",%ld,%ld,%s\n",
                r->c->id, r->c->label, r->size, unit(r), x.pf, x.pu, x.pr, x.pq, x.pg, x.p2,
                x.pt, bench_verdict(r), x.pe, x.prt, r->kernels, r->kernels_unfused, x.p1);
    }
}

/* Markdown cell text: '|' and '*' would break the table or turn to italics. */
static void md_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|' || *s == '*') fputc('\\', f);
        fputc(*s, f);
    }
}

/* "W1, W2: text" lines, one per run of rows that share a reference and the
 * store mode that won. */
static void md_references(FILE *f, const bench_machine *m, const bench_row *rows, int n)
{
    fprintf(f, "\nReference loops (C in bench/, 1 thread: %s intrinsics, OpenBLAS where named; "
               "each in the faster of ordinary and streaming stores where both ran):\n",
            m->ref_isa);
    for (int i = 0; i < n;) {
        char a[160], b[160];
        const char *text = ref_text(a, sizeof a, &rows[i]);
        int j = i;
        fprintf(f, "- %s", rows[i].c->id);
        while (++j < n && strcmp(ref_text(b, sizeof b, &rows[j]), text) == 0)
            if (strcmp(rows[j].c->id, rows[j - 1].c->id) != 0) fprintf(f, ", %s", rows[j].c->id);
        fputs(": ", f);
        md_text(f, text);
        fputc('\n', f);
        i = j;
    }
}

void report_md(FILE *f, const bench_machine *m, const bench_row *rows, int n)
{
    machine_lines(f, m, "");
    fputs("\n| id | workload | size | unit | fused | unfused | reference | fused/ref "
          "| unfused/fused | fused, 2 threads | target | result | kernels fused/unfused "
          "| first call |\n"
          "|----|----------|------|------|------:|--------:|----------:|----------:"
          "|--------------:|-----------------:|--------|--------|------:|------:|\n",
          f);
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cells x;
        row_cells(&x, r);
        fprintf(f, "| %s | ", r->c->id);
        md_text(f, r->c->label);
        fprintf(f, " | %s | %s | %s | %s | %s | %s | %s | %s | ", r->size, unit(r), x.pf, x.pu,
                x.pr, x.pq, x.pg, x.p2);
        md_text(f, x.pt);
        fprintf(f, " | %s | %s | %s |\n", bench_verdict(r), x.pk, x.p1);
    }
    md_references(f, m, rows, n);
}
