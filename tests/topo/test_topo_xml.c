/*
 * Tests of the XML topology files (topo/topo_xml.c, topo_file_xml.c,
 * topo_sys.c; docs/topology.md):
 *   - the reader: declaration, comments, both quotes, entities, self-closing
 *     tags, nesting, line numbers; its limits (depth, attributes, name and
 *     value lengths, file size);
 *   - <cluster> and the line format give the same map (a hand-written one
 *     and a synthetic 4 spines x 4 leaves x 4 nodes x 8 ranks scattered);
 *   - dump -> load round trips through <cluster> (names that need escaping)
 *     and HCOMM_TOPO_DUMP_FILE's choice of format by the file name;
 *   - malformed files: each error names file:line and what is wrong;
 *   - NCCL's <system>: NUMA nodes with their CPUs, devices with their NUMA
 *     node, the NUMA node of a CPU set, and of this process when it is
 *     bound to one CPU (hc_topo_self).
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "topo/test_rng.h"

#include "topo/topo_int.h"

static char tmpdir[] = "/tmp/hc-topo-xml-test.XXXXXX";

/* Writes text to tmpdir/name; the path (static buffer). */
static const char *put(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void assert_same_map(const hc_topo_map_t *a, const hc_topo_map_t *b)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->nnodes, b->nnodes);
    assert_int_equal(a->nleaves, b->nleaves);
    for (int r = 0; r < a->n; r++) {
        assert_int_equal(a->node[r], b->node[r]);
        assert_int_equal(a->numa[r], b->numa[r]);
    }
    for (int k = 0; k < a->nnodes; k++) {
        assert_string_equal(a->name[k], b->name[k]);
        assert_string_equal(a->sw[k], b->sw[k]);
        assert_int_equal(a->leaf[k], b->leaf[k]);
    }
    for (int r = 0; r < a->n && a->n <= 64; r++)
        for (int q = 0; q < a->n; q++)
            assert_int_equal(hc_topo_class(a, r, q), hc_topo_class(b, r, q));
}

static hc_topo_map_t *load(const char *path)
{
    hc_topo_map_t *m = NULL;
    if (hc_topo_map_load(path, NULL, &m) != HCOMM_OK) fail_msg("%s: %s", path, hcomm_last_error());
    return m;
}

/* ---- the reader ------------------------------------------------------------------------- */

static void test_reader(void **state)
{
    (void)state;
    const char *path =
        put("r.xml", "\xef\xbb\xbf  <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<!-- a comment\n over two lines -->\n"
                     "<a x=\"1\" y='two' z = \"&lt;&amp;&gt;&quot;&apos;&#65;&#x42;&#xe9;\">\n"
                     "  <b/>\n"
                     "  <c\n    k=\"multi\nline\">  <!-- inside -->\n"
                     "    <d />\n"
                     "  </c >\n"
                     "</a>\n<!-- after -->\n");
    hc_xml_t *doc = NULL;
    const hc_xml_elem_t *a = NULL;
    assert_int_equal(hc_xml_read(path, &doc, &a), HCOMM_OK);
    assert_string_equal(a->name, "a");
    assert_int_equal(a->line, 4);
    assert_int_equal(a->nattrs, 3);
    assert_string_equal(hc_xml_attr(a, "x"), "1");
    assert_string_equal(hc_xml_attr(a, "y"), "two");
    assert_string_equal(hc_xml_attr(a, "z"), "<&>\"'AB\xc3\xa9");
    assert_null(hc_xml_attr(a, "w"));
    const hc_xml_elem_t *b = a->child, *c = b->next;
    assert_string_equal(b->name, "b");
    assert_int_equal(b->line, 5);
    assert_null(b->child);
    assert_string_equal(c->name, "c");
    assert_int_equal(c->line, 6);
    assert_string_equal(hc_xml_attr(c, "k"), "multi line"); /* whitespace normalized */
    assert_null(c->next);
    assert_string_equal(c->child->name, "d");
    assert_int_equal(c->child->line, 9);
    assert_ptr_equal(c->child->parent, c);
    hc_xml_free(doc);
}

/* text in tmpdir/bad.xml fails to load as a map with an error containing want. */
static void expect_error(const char *text, const char *want)
{
    const char *path = put("bad.xml", text);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_ERR_INVALID);
    assert_null(m);
    const char *e = hcomm_last_error();
    if (!strstr(e, want)) fail_msg("error \"%s\" does not say \"%s\" (file: %s)", e, want, text);
}

static void test_reader_limits(void **state)
{
    (void)state;
    char *text = malloc(HC_XML_MAX_VALUE + 4096);
    assert_non_null(text);
    /* depth */
    size_t o = 0;
    for (int i = 0; i <= HC_XML_MAX_DEPTH; i++)
        o += (size_t)sprintf(text + o, "<cluster>\n");
    text[o] = '\0';
    expect_error(text, "bad.xml:65: <cluster> nested deeper than 64 elements");
    /* attributes per element */
    o = (size_t)sprintf(text, "<cluster>\n<node");
    for (int i = 0; i <= HC_XML_MAX_ATTRS; i++)
        o += (size_t)sprintf(text + o, " a%d=\"\"", i);
    sprintf(text + o, "/>\n</cluster>\n");
    expect_error(text, "bad.xml:2: <node>: more than 32 attributes");
    /* name and value lengths */
    o = (size_t)sprintf(text, "<cluster>\n\n<");
    memset(text + o, 'n', HC_XML_MAX_NAME + 1);
    sprintf(text + o + HC_XML_MAX_NAME + 1, "/></cluster>");
    expect_error(text, "bad.xml:3: an element name after '<' longer than 64 characters");
    o = (size_t)sprintf(text, "<cluster>\n<node name=\"");
    memset(text + o, 'v', HC_XML_MAX_VALUE + 1);
    sprintf(text + o + HC_XML_MAX_VALUE + 1, "\"/></cluster>");
    expect_error(text, "bad.xml:2: attribute name: value longer than 4096 characters");
    free(text);
    /* the file's size: a '<' and then 16 MiB of nothing (sparse) */
    const char *path = put("big.xml", "<");
    assert_int_equal(truncate(path, (off_t)HC_XML_MAX_BYTES + 2), 0);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "big.xml: larger than 16777216 bytes"));
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "a NUL byte"));
}

/* ---- <cluster> and the line format ------------------------------------------------------ */

static const char cluster_xml[] =
    "<?xml version=\"1.0\"?>\n"
    "<cluster version=\"1\">\n"
    "  <switch name=\"spine0\">\n"
    "    <switch name=\"leaf0\">\n"
    "      <node name=\"hostA\"><rank id=\"0\" numa=\"0\"/><rank id=\"4\" numa=\"1\"/></node>\n"
    "      <node name=\"hostB\"><rank id=\"1\"/></node>\n"
    "    </switch>\n"
    "    <switch name=\"leaf1\">\n"
    "      <node name=\"hostC\">\n"
    "        <rank id=\"2\" numa=\"0\"/>\n"
    "      </node>\n"
    "    </switch>\n"
    "  </switch>\n"
    "  <switch name=\"spine1\"><switch name=\"leaf0\"><node name=\"hostD\"/></switch></switch>\n"
    "  <node name=\"hostE\"><rank id=\"3\"/></node>\n"
    "</cluster>\n";

static const char cluster_lines[] = "node hostA switch spine0/leaf0\n"
                                    "node hostB switch spine0/leaf0\n"
                                    "node hostC switch spine0/leaf1\n"
                                    "node hostD switch spine1/leaf0\n"
                                    "rank 0 node hostA numa 0\n"
                                    "rank 1 node hostB\n"
                                    "rank 2 node hostC numa 0\n"
                                    "rank 3 node hostE\n"
                                    "rank 4 node hostA numa 1\n";

static void test_cluster_equals_lines(void **state)
{
    (void)state;
    hc_topo_map_t *x = load(put("c.xml", cluster_xml)), *l = load(put("c.topo", cluster_lines));
    assert_same_map(x, l);
    assert_int_equal(x->n, 5);
    assert_int_equal(x->nnodes, 4); /* hostD has no rank */
    assert_string_equal(x->sw[x->node[2]], "spine0/leaf1");
    assert_string_equal(x->sw[x->node[3]], "");
    assert_int_equal(hc_topo_class(x, 0, 4), HC_TOPO_HOST);
    assert_int_equal(hc_topo_class(x, 0, 1), HC_TOPO_SWITCH);
    assert_int_equal(hc_topo_class(x, 0, 2), HC_TOPO_NET);
    hc_topo_file_kind_t kind;
    assert_int_equal(hc_topo_file_kind(put("c.xml", cluster_xml), &kind), HCOMM_OK);
    assert_int_equal(kind, HC_TOPO_FILE_CLUSTER);
    assert_int_equal(hc_topo_file_kind(put("c.topo", cluster_lines), &kind), HCOMM_OK);
    assert_int_equal(kind, HC_TOPO_FILE_LINES);
    hc_topo_map_free(x);
    hc_topo_map_free(l);
    /* This rank's switch from a <cluster> file, by its exact name or host name. */
    hc_topo_self_t me;
    assert_int_equal(hc_topo_self(put("c.xml", cluster_xml), "hostC/net:[1]", &me), HCOMM_OK);
    assert_string_equal(me.sw, "spine0/leaf1");
    assert_int_equal(hc_topo_self(put("c.xml", cluster_xml), "hostE", &me), HCOMM_OK);
    assert_string_equal(me.sw, "");
}


/* 4 spines x 4 leaves x 4 nodes x 8 ranks (512), numbered in a random
 * order, on 2 NUMA nodes per node, written in both forms. */
static void test_synthetic_equivalence(void **state)
{
    (void)state;
    enum {
        SPINES = 4,
        LEAVES = 4,
        PER_LEAF = 4,
        PPN = 8,
        NODES = SPINES * LEAVES * PER_LEAF,
        N = NODES * PPN
    };
    int perm[N];
    for (int i = 0; i < N; i++)
        perm[i] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    char lp[256], xp[256];
    snprintf(lp, sizeof(lp), "%s/syn.topo", tmpdir);
    snprintf(xp, sizeof(xp), "%s/syn.xml", tmpdir);
    FILE *l = fopen(lp, "w"), *x = fopen(xp, "w");
    assert_true(l && x);
    fprintf(x, "<cluster>\n");
    for (int s = 0; s < SPINES; s++) {
        fprintf(x, " <switch name=\"spine%d\">\n", s);
        for (int lf = 0; lf < LEAVES; lf++) {
            fprintf(x, "  <switch name=\"leaf%d\">\n", lf); /* leaf names repeat under each spine */
            for (int k = 0; k < PER_LEAF; k++) {
                int node = (s * LEAVES + lf) * PER_LEAF + k;
                fprintf(l, "node n%03d switch spine%d/leaf%d\n", node, s, lf);
                fprintf(x, "   <node name=\"n%03d\">", node);
                for (int i = 0; i < PPN; i++) {
                    int slot = node * PPN + i;
                    fprintf(l, "rank %d node n%03d numa %d\n", perm[slot], node, i * 2 / PPN);
                    fprintf(x, "<rank id=\"%d\" numa=\"%d\"/>", perm[slot], i * 2 / PPN);
                }
                fprintf(x, "</node>\n");
            }
            fprintf(x, "  </switch>\n");
        }
        fprintf(x, " </switch>\n");
    }
    fprintf(x, "</cluster>\n");
    fclose(l);
    fclose(x);
    hc_topo_map_t *a = load(lp), *b = load(xp);
    assert_int_equal(a->n, N);
    assert_int_equal(a->nleaves, SPINES * LEAVES);
    assert_same_map(a, b);
    hc_topo_map_free(a);
    hc_topo_map_free(b);
}

/* ---- dumps ------------------------------------------------------------------------------ */

static void roundtrip(const char *lines)
{
    hc_topo_map_t *a = load(put("rt.topo", lines));
    char xp[256], lp[256];
    snprintf(xp, sizeof(xp), "%s/dump.xml", tmpdir);
    snprintf(lp, sizeof(lp), "%s/dump.topo", tmpdir);
    if (hc_topo_map_dump_path(a, xp) != HCOMM_OK) fail_msg("%s", hcomm_last_error());
    hc_topo_file_kind_t kind;
    assert_int_equal(hc_topo_file_kind(xp, &kind), HCOMM_OK);
    assert_int_equal(kind, HC_TOPO_FILE_CLUSTER);
    hc_topo_map_t *b = load(xp);
    assert_same_map(a, b);
    /* and back to lines */
    assert_int_equal(hc_topo_map_dump_path(b, lp), HCOMM_OK);
    assert_int_equal(hc_topo_file_kind(lp, &kind), HCOMM_OK);
    assert_int_equal(kind, HC_TOPO_FILE_LINES);
    hc_topo_map_t *c = load(lp);
    assert_same_map(a, c);
    hc_topo_map_free(a);
    hc_topo_map_free(b);
    hc_topo_map_free(c);
}

static void test_dump_roundtrip(void **state)
{
    (void)state;
    roundtrip(cluster_lines);
    /* names that XML must escape; a leaf named like another spine's; ranks
     * out of order; nodes with no switch */
    roundtrip("node a&b<c>\"d'e switch s&0/l<1>\n"
              "node x switch s1/l<1>\n"
              "node y switch s1\n"
              "rank 3 node a&b<c>\"d'e numa 2\n"
              "rank 0 node x\n"
              "rank 1 node host/net:[4026531840]\n"
              "rank 2 node y numa 0\n"
              "rank 4 node a&b<c>\"d'e\n");
    /* A switch path XML cannot hold is refused, naming it. */
    hc_topo_map_t *m = load(put("rt.topo", "node a switch s//l\nrank 0 node a\n"));
    char xp[256];
    snprintf(xp, sizeof(xp), "%s/dump.XML", tmpdir);
    assert_int_equal(hc_topo_map_dump_path(m, xp), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "switch path \"s//l\" has an empty part"));
    hc_topo_map_free(m);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        /* the reader */
        {"<cluster>\n  <node name=\"a\">\n</cluster>\n",
         "bad.xml:3: end tag </cluster> does not match <node> of line 2"},
        {"<cluster>\n<node name=\"a\"><rank id=\"0\"/></node>\n</cluster>\n<cluster/>",
         "bad.xml:4: a second element after the root element <cluster> of line 1 ended"},
        {"<cluster/>\n</cluster>", "bad.xml:2: an end tag after the root element"},
        {"<cluster>\n<node name=\"a\" name=\"b\"/>\n</cluster>",
         "bad.xml:2: <node>: attribute name given twice"},
        {"<cluster>\n<node name=a/>\n</cluster>", "bad.xml:2: attribute name: want a quoted value"},
        {"<cluster>\n<node name=\"a/>\n</cluster>",
         "bad.xml:2: attribute name: '<' in its value, on line 3 (a closing \" missing?"},
        {"<cluster>\n\n<node name=\"a\"\n", "bad.xml:3: tag <node not closed by '>'"},
        {"<cluster>\n<node name=\"a\"/>\n", "bad.xml:3: the file ends inside <cluster> of line 1"},
        {"<cluster>\n<node name\"a\"/>\n</cluster>", "bad.xml:2: <node: attribute name: want '='"},
        {"<cluster>\n<node name=\"a\"x=\"1\"/>\n</cluster>", "bad.xml:2: <node: want a space"},
        {"<cluster>\n  hello\n</cluster>", "bad.xml:2: text \"hello\" inside an element"},
        {"<cluster>\n<!-- a -- b -->\n</cluster>", "bad.xml:2: \"--\" inside a comment"},
        {"<cluster>\n<!-- a\n", "bad.xml:2: comment <!-- not closed"},
        {"<cluster>\n<node name=\"a&b\"/>\n</cluster>", "bad.xml:2: '&' starts no known entity"},
        {"<cluster>\n<node name=\"&#0;\"/>\n</cluster>", "bad.xml:2: '&' starts no known entity"},
        {"<?xml version=\"1.0\"?>\n<?foo?>\n<cluster/>", "bad.xml:2: a processing instruction"},
        {"<cluster>\n<![CDATA[x]]>\n</cluster>", "bad.xml:2: CDATA sections are not supported"},
        {"<!DOCTYPE x>\n<cluster/>", "bad.xml:1: <!DOCTYPE ...> is not supported"},
        {"<cluster>\n< node/>\n</cluster>", "bad.xml:2: want an element name after '<'"},
        {"<?xml version=\"1.0\"\n<cluster/>", "bad.xml:1: <?xml declaration not closed"},
        {"<!-- nothing -->\n", "bad.xml:2: no root element"},
        /* the forms */
        {"<topology version=\"2.0\"/>", "bad.xml:1: <topology> is hwloc's XML"},
        {"<nodes/>", "bad.xml:1: root element <nodes>: want <cluster>"},
        {"<cluster version=\"2\"/>",
         "bad.xml:1: <cluster version=\"2\">: this hcomm reads version 1"},
        {"<cluster size=\"2\"/>", "bad.xml:1: <cluster>: unknown attribute size"},
        {"<cluster>\n<sw name=\"a\"/>\n</cluster>",
         "bad.xml:2: unknown element <sw> inside <cluster>"},
        {"<cluster>\n<switch name=\"s\">\n<rank id=\"0\"/></switch>\n</cluster>",
         "bad.xml:3: unknown element <rank> inside <switch>"},
        {"<cluster>\n<switch/>\n</cluster>", "bad.xml:2: <switch> without a name"},
        {"<cluster>\n<switch name=\"a/b\"><node name=\"x\"/></switch>\n</cluster>",
         "bad.xml:2: <switch name=\"a/b\">: a switch name holds no whitespace"},
        {"<cluster>\n<node name=\"a b\"/>\n</cluster>",
         "bad.xml:2: <node name=\"a b\">: a node name holds no whitespace"},
        {"<cluster>\n<node name=\"a\" numa=\"1\"/>\n</cluster>",
         "bad.xml:2: <node>: unknown attribute numa"},
        {"<cluster>\n<node name=\"a\">\n<rank/></node>\n</cluster>",
         "bad.xml:3: <rank id=\"\">: want an integer"},
        {"<cluster>\n<node name=\"a\">\n\n<rank id=\"x\"/></node>\n</cluster>",
         "bad.xml:4: <rank id=\"x\">: want an integer"},
        {"<cluster>\n<node name=\"a\"><rank id=\"0\" numa=\"-2\"/></node>\n</cluster>",
         "bad.xml:2: <rank numa=\"-2\">: want an integer in -1..65536"},
        {"<cluster>\n<node name=\"a\"><rank id=\"0\" core=\"1\"/></node>\n</cluster>",
         "bad.xml:2: <rank>: unknown attribute core"},
        {"<cluster>\n<node name=\"a\"><cpu/></node>\n</cluster>",
         "bad.xml:2: <cpu> inside <node>: want <rank"},
        {"<cluster>\n<node name=\"a\"><rank id=\"0\"><x/></rank></node>\n</cluster>",
         "bad.xml:2: <x> inside <rank>: a <rank> holds no elements"},
        {"<cluster>\n<node name=\"a\"><rank id=\"0\"/></node>\n<node name=\"b\"><rank "
         "id=\"0\"/></node>\n</cluster>",
         "bad.xml:3: rank 0 placed twice"},
        {"<cluster>\n<node name=\"a\"><rank id=\"0\"/></node>\n<node name=\"b\"><rank "
         "id=\"2\"/></node>\n</cluster>",
         "rank 1 has no rank line"},
        {"<cluster>\n<switch name=\"x\"><node name=\"a\"><rank id=\"0\"/></node></switch>\n"
         "<switch name=\"y\">\n<node name=\"a\"/></switch>\n</cluster>",
         "bad.xml:4: node a listed twice with different switches (x, y)"},
        {"<cluster>\n<switch name=\"s\"/>\n</cluster>", "no rank lines (or <rank> elements)"},
        {"<system>\n<cpu numaid=\"zero\"/>\n</system>",
         "bad.xml:2: <cpu numaid=\"zero\">: want an integer"},
        {"<system>\n<cpu affinity=\"fffffffff\"/>\n</system>",
         "bad.xml:2: <cpu affinity=\"fffffffff\">: want a CPU mask"},
        {"<system>\n<cpu affinity=\"ff,,ff\"/>\n</system>",
         "bad.xml:2: <cpu affinity=\"ff,,ff\">: want a CPU mask"},
        {"<system>\n<pci><cpu/></pci>\n</system>", "bad.xml:2: a <cpu> inside <pci>"},
        {"<system>\n<cpu><pci><nic><net speed=\"fast\"/></nic></pci></cpu>\n</system>",
         "bad.xml:2: <net speed=\"fast\">: want a number of Mb/s"},
        {"<system version=\"1\">\n<cpu numaid=\"0\"/>\n</system>",
         "bad.xml:1: an NCCL <system> file describes one node"},
    };
    for (size_t i = 0; i < HC_ARRAY_SIZE(cases); i++)
        expect_error(cases[i].text, cases[i].want);
}

/* ---- NCCL's <system> -------------------------------------------------------------------- */

static const char system_xml[] =
    "<!-- a node like NCCL's topology files describe: 2 sockets -->\n"
    "<system version=\"1\">\n"
    "  <cpu numaid=\"0\" affinity=\"000000ff,ffff0000,00ffffff\" arch=\"x86_64\" "
    "vendor=\"GenuineIntel\">\n"
    "    <pci busid=\"ffff:ff:01.0\" class=\"0x060400\" link_speed=\"8 GT/s\" link_width=\"16\">\n"
    "      <pci busid=\"0000:10:1c.0\" class=\"0x030200\" link_speed=\"8 GT/s\" "
    "link_width=\"16\"/>\n"
    "      <pci busid=\"0000:10:1b.0\" class=\"0x020000\" link_speed=\"8 GT/s\" "
    "link_width=\"16\"/>\n"
    "    </pci>\n"
    "    <pci busid=\"0000:0d:00.0\" class=\"0x020700\">\n"
    "      <nic>\n"
    "        <net name=\"mlx5_0\" dev=\"0\" speed=\"200000\" port=\"1\" latency=\"0.000000\" "
    "guid=\"0x1c34da0300abcdef\" maxconn=\"262144\" gdr=\"1\"/>\n"
    "      </nic>\n"
    "    </pci>\n"
    "  </cpu>\n"
    "  <cpu numaid=\"1\" affinity=\"ffffff00,0000ffff,ff000000\">\n"
    "    <pci busid=\"0000:90:1c.0\" class=\"0x030200\">\n"
    "      <gpu dev=\"4\" sm=\"80\" rank=\"4\" gdr=\"1\"><nvlink target=\"0000:00:00.0\" "
    "count=\"12\"/></gpu>\n"
    "    </pci>\n"
    "  </cpu>\n"
    "</system>\n";

static void set_cpus(uint64_t *set, const int *cpus, int n)
{
    memset(set, 0, sizeof(uint64_t) * HC_TOPO_CPUSET_WORDS);
    for (int i = 0; i < n; i++)
        set[cpus[i] / 64] |= 1ull << (cpus[i] % 64);
}

static void count_line(const char *text, void *arg)
{
    (void)text;
    (*(int *)arg)++;
}

static void test_system(void **state)
{
    (void)state;
    const char *path = put("sys.xml", system_xml);
    hc_topo_file_kind_t kind;
    assert_int_equal(hc_topo_file_kind(path, &kind), HCOMM_OK);
    assert_int_equal(kind, HC_TOPO_FILE_SYSTEM);
    hc_topo_sys_t *sys = NULL;
    assert_int_equal(hc_topo_sys_load(path, &sys), HCOMM_OK);
    assert_int_equal(sys->ncpus, 2);
    assert_int_equal(sys->cpu[0].numa, 0);
    assert_int_equal(sys->cpu[0].line, 3);
    assert_true(sys->cpu[0].has_affinity);
    /* 000000ff,ffff0000,00ffffff: CPUs 0-23 and 48-71 */
    assert_true(sys->cpu[0].cpus[0] == (0xffffffull | 0xffff000000000000ull));
    assert_true(sys->cpu[0].cpus[1] == 0xffull);
    assert_int_equal(sys->ndevs, 4);
    assert_int_equal(sys->dev[0].kind, HC_TOPO_DEV_PCI_GPU);
    assert_string_equal(sys->dev[0].busid, "0000:10:1c.0");
    assert_int_equal(sys->dev[1].kind, HC_TOPO_DEV_PCI_NET);
    assert_int_equal(sys->dev[1].numa, 0);
    const hc_topo_sys_dev_t *net = &sys->dev[2], *gpu = &sys->dev[3];
    assert_int_equal(net->kind, HC_TOPO_DEV_NET);
    assert_string_equal(net->name, "mlx5_0");
    assert_string_equal(net->busid, "0000:0d:00.0");
    assert_string_equal(net->guid, "0x1c34da0300abcdef");
    assert_int_equal(net->dev, 0);
    assert_int_equal(net->port, 1);
    assert_true(net->speed_mbps == 200000);
    assert_int_equal(net->numa, 0);
    assert_int_equal(gpu->kind, HC_TOPO_DEV_GPU);
    assert_int_equal(gpu->dev, 4);
    assert_int_equal(gpu->numa, 1);
    assert_string_equal(gpu->busid, "0000:90:1c.0");
    int lines = 0;
    hc_topo_sys_describe(sys, count_line, &lines);
    assert_int_equal(lines, 6);
    uint64_t set[HC_TOPO_CPUSET_WORDS];
    set_cpus(set, (int[]){0, 1, 70}, 3);
    assert_int_equal(hc_topo_sys_numa(sys, set), 0);
    set_cpus(set, (int[]){24, 95}, 2);
    assert_int_equal(hc_topo_sys_numa(sys, set), 1);
    set_cpus(set, (int[]){0, 24}, 2); /* across both */
    assert_int_equal(hc_topo_sys_numa(sys, set), -1);
    set_cpus(set, (int[]){200}, 1); /* in neither */
    assert_int_equal(hc_topo_sys_numa(sys, set), -1);
    set_cpus(set, NULL, 0);
    assert_int_equal(hc_topo_sys_numa(sys, set), -1);
    hc_topo_sys_free(sys);
    /* Without affinities the file cannot tell. */
    assert_int_equal(
        hc_topo_sys_load(put("noaff.xml", "<system><cpu numaid=\"3\"/></system>"), &sys), HCOMM_OK);
    set_cpus(set, (int[]){0}, 1);
    assert_int_equal(hc_topo_sys_numa(sys, set), -2);
    hc_topo_sys_free(sys);
    /* The other kinds are not system files. */
    assert_int_equal(hc_topo_sys_load(put("c.xml", cluster_xml), &sys), HCOMM_ERR_INVALID);
    assert_non_null(
        strstr(hcomm_last_error(), "not an NCCL <system> XML file (its root is <cluster>)"));
    assert_int_equal(hc_topo_sys_load(put("c.topo", cluster_lines), &sys), HCOMM_ERR_INVALID);
}

/* This process bound to one CPU: hc_topo_self takes its NUMA node from the
 * <cpu> whose affinity holds that CPU, and has no switch. */
static void test_system_self(void **state)
{
    (void)state;
    cpu_set_t saved, one;
    assert_int_equal(sched_getaffinity(0, sizeof(saved), &saved), 0);
    int cpu = -1;
    for (int i = 0; i < 64 && cpu < 0; i++)
        if (CPU_ISSET(i, &saved)) cpu = i;
    if (cpu < 0) skip();
    /* numaid 7 holds every CPU but this one, numaid 5 only this one. */
    uint64_t mask = 1ull << cpu;
    char text[512];
    snprintf(text, sizeof(text),
             "<system version=\"1\">\n"
             "  <cpu numaid=\"7\" affinity=\"ffffffff,%08x,%08x\"/>\n"
             "  <cpu numaid=\"5\" affinity=\"%08x,%08x\"/>\n"
             "</system>\n",
             (unsigned)(~mask >> 32), (unsigned)(~mask & 0xffffffffu), (unsigned)(mask >> 32),
             (unsigned)(mask & 0xffffffffu));
    const char *path = put("self.xml", text);
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
    hc_topo_self_t me;
    hcomm_status_t st = hc_topo_self(path, "hostA", &me);
    assert_int_equal(sched_setaffinity(0, sizeof(saved), &saved), 0);
    assert_int_equal(st, HCOMM_OK);
    assert_int_equal(me.numa, 5);
    assert_string_equal(me.sw, "");
    /* Bound to that CPU and another: no single <cpu> holds both. */
    int other = -1;
    for (int i = 0; i < 64 && other < 0; i++)
        if (i != cpu && CPU_ISSET(i, &saved)) other = i;
    if (other < 0) return;
    CPU_SET(other, &one);
    assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
    st = hc_topo_self(path, "hostA", &me);
    assert_int_equal(sched_setaffinity(0, sizeof(saved), &saved), 0);
    assert_int_equal(st, HCOMM_OK);
    assert_int_equal(me.numa, -1);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_reader_limits),
        cmocka_unit_test(test_cluster_equals_lines),
        cmocka_unit_test(test_synthetic_equivalence),
        cmocka_unit_test(test_dump_roundtrip),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_system),
        cmocka_unit_test(test_system_self),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
