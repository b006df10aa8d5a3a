# Made by dlperf lab. Rerun with: gnuplot /tmp/ab/lab2/plots/workers-wait.gp
set terminal pngcairo size 900,560 enhanced font 'Sans,10'
set output '/tmp/ab/lab2/plots/workers-wait.png'
set title 'Data wait by data-loader workers'
set ylabel 'share of the step waiting for data (%)'
set grid ytics
set key top left
set yrange [0:*]
set xlabel 'workers'
set offsets graph 0.05, graph 0.05, 0, 0
plot '/tmp/ab/lab2/plots/workers-wait-0.dat' using 1:2 with linespoints lw 2 pt 7 title 'measured'
