/*
 * report.c - the benchmark's three outputs: a plain-text table for the
 * terminal, bench/results.csv for tools, and the markdown table that
 * README.md shows (bench/results.md), machine and ISA included.
 */
#include "bench.h"

#include <string.h>

const char *bench_verdict(const bench_row *r)
{
    if (r->wrong) return "WRONG";
    if (r->c->kind == TARGET_US) return r->fused <= r->c->target ? "PASS" : "MISS";
    if (r->ref <= 0) return "n/a";
    if (r->c->beat_unfused && !(r->unfused > r->fused)) return "MISS";
    return r->fused / r->ref <= r->c->target ? "PASS" : "MISS";
}

static const char *unit(const bench_row *r) { return r->c->kind == TARGET_US ? "us" : "ms"; }

/* A time, or "-" when it was not measured. */
static const char *fmt_time(char *buf, size_t size, const bench_row *r, double v)
{
    if (v < 0) return "-";
    snprintf(buf, size, r->c->kind == TARGET_US || v < 1 ? "%.3f" : "%.2f", v);
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
    if (r->c->kind == TARGET_US)
        snprintf(buf, size, "<= %.1f us", r->c->target);
    else
        snprintf(buf, size, "<= %.2fx ref%s", r->c->target,
                 r->c->beat_unfused ? ", < unf" : "");
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
    char kern[48];
    const char *pf, *pu, *pr, *pq, *pg, *p2, *pt, *pe, *pk;
} cells;

static void row_cells(cells *x, const bench_row *r)
{
    x->pf = fmt_time(x->fused, sizeof x->fused, r, r->fused);
    x->pu = fmt_time(x->unfused, sizeof x->unfused, r, r->unfused);
    x->pr = fmt_time(x->ref, sizeof x->ref, r, r->ref);
    x->pq = fmt_ratio(x->ratio, sizeof x->ratio, r->fused, r->ref);
    x->pg = fmt_ratio(x->gain, sizeof x->gain, r->unfused, r->fused);
    x->p2 = fmt_time(x->fused2, sizeof x->fused2, r, r->fused2);
    x->pt = fmt_target(x->target, sizeof x->target, r);
    x->pe = fmt_err(x->err, sizeof x->err, r->err);
    x->pk = fmt_kernels(x->kern, sizeof x->kern, r);
}

static void machine_lines(FILE *f, const bench_machine *m, const char *prefix)
{
    fprintf(f, "%smachine: %s; ISA: %s; backend: %s; %s\n", prefix, m->cpu, m->isa, m->backend,
            m->date);
    fprintf(f, "%smedians of %d runs after a warm-up%s; fused, unfused and ref: 1 thread; "
               "fused 2T: threads = 2\n",
            prefix, m->runs, m->quick ? " (--quick sizes: a smoke test, not a measurement)" : "");
}

void report_text(FILE *f, const bench_machine *m, const bench_row *rows, int n)
{
    fputc('\n', f);
    machine_lines(f, m, "");
    fprintf(f, "\n%-3s %-44s %-9s %-4s %9s %9s %9s %9s %9s %9s %-19s %-6s %-11s %s\n", "id",
            "workload", "size", "unit", "fused", "unfused", "ref", "fused/ref", "unf/fused",
            "fused 2T", "target", "result", "max rel err", "kernels f/u");
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cells x;
        row_cells(&x, r);
        fprintf(f, "%-3s %-44.44s %-9s %-4s %9s %9s %9s %9s %9s %9s %-19s %-6s %-11s %s\n",
                r->c->id, r->c->label, r->size, unit(r), x.pf, x.pu, x.pr, x.pq, x.pg, x.p2,
                x.pt, bench_verdict(r), x.pe, x.pk);
    }
    fputs("\nreference loops:\n", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "  %s %s: %s\n", rows[i].c->id, rows[i].c->label, rows[i].c->ref_label);
}

void report_csv(FILE *f, const bench_row *rows, int n)
{
    fputs("id,workload,size,unit,fused,unfused,ref,fused_over_ref,unfused_over_fused,"
          "fused_2t,target,result,max_rel_err,reference,kernels_fused,kernels_unfused\n",
          f);
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cells x;
        row_cells(&x, r);
        fprintf(f, "%s,\"%s\",%s,%s,%s,%s,%s,%s,%s,%s,\"%s\",%s,%s,\"%s\",%ld,%ld\n",
                r->c->id, r->c->label, r->size, unit(r), x.pf, x.pu, x.pr, x.pq, x.pg, x.p2,
                x.pt, bench_verdict(r), x.pe, r->c->ref_label, r->kernels, r->kernels_unfused);
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

/* "W1, W2: text" lines, one per run of rows that share a reference. */
static void md_references(FILE *f, const bench_row *rows, int n)
{
    fputs("\nReference loops (1 thread, in bench/: C with AVX2+FMA intrinsics, OpenBLAS "
          "where named):\n", f);
    for (int i = 0; i < n;) {
        int j = i;
        fprintf(f, "- %s", rows[i].c->id);
        while (++j < n && strcmp(rows[j].c->ref_label, rows[i].c->ref_label) == 0)
            if (strcmp(rows[j].c->id, rows[j - 1].c->id) != 0) fprintf(f, ", %s", rows[j].c->id);
        fputs(": ", f);
        md_text(f, rows[i].c->ref_label);
        fputc('\n', f);
        i = j;
    }
}

void report_md(FILE *f, const bench_machine *m, const bench_row *rows, int n)
{
    machine_lines(f, m, "");
    fputs("\n| id | workload | size | unit | fused | unfused | reference | fused/ref "
          "| unfused/fused | fused, 2 threads | target | result | kernels fused/unfused |\n"
          "|----|----------|------|------|------:|--------:|----------:|----------:"
          "|--------------:|-----------------:|--------|--------|------:|\n",
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
        fprintf(f, " | %s | %s |\n", bench_verdict(r), x.pk);
    }
    md_references(f, rows, n);
}
